"""The project's error classes: what a user can fix, as opposed to a bug. A leaf (no imports), so every layer
raises the same classes. The ``etc-*`` commands print an :class:`EtcError` as one line naming the file, field or
option and what was expected (:func:`etc_fairseq.cli.common.report_user_errors`); any other exception is a bug
and keeps its traceback.

Each class is also the built-in exception a Python caller would expect (a bad value is a ``ValueError``), so
``except ValueError`` keeps working for library users.
"""


class EtcError(Exception):
    """Something the user can fix: a bad input, setting, model file or output location. The message is one line
    naming where (file, line, record, field, option) and what was expected."""


class ConfigError(EtcError, ValueError):
    """A setting that cannot work: a command-line option, a config field, a function argument, or a
    combination of them (the message names the option or field and the values it accepts)."""


class CheckpointLoadError(EtcError, ValueError):
    """A model file was refused or could not be read: a fairseq checkpoint (unsafe pickle content, a config
    that names something other than what etc-fairseq builds; missing, truncated, corrupt) or a core model
    directory (``config.json`` / ``model.safetensors``: unknown or mistyped fields, tensors that do not match
    the config). The message is one line naming the file."""


class InputFormatError(EtcError, ValueError):
    """An input file is missing, unreadable, or not in the layout it was expected to have (one line names
    the file, and the line, record and field where one is at fault)."""


class OutputRefusedError(EtcError, ValueError):
    """An output location would replace, delete or hide an input, or something the command did not write."""
