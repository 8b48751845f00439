"""The project's error classes: what a user can fix, as opposed to a bug. A leaf (no imports), so every layer
raises the same classes. The ``etc-*`` commands print an :class:`EtcError` as one line naming the file, field or
option and what was expected (:func:`etc_fairseq.cli.common.report_user_errors`), and so do ``fairseq-train`` /
``fairseq-validate`` with the plugin (:mod:`etc_fairseq.fairseq_fixes.one_line_errors`); any other exception is
a bug and keeps its traceback. So a user error is raised as one of these classes where the bad input is
detected, and a plain ``ValueError`` / ``KeyError`` / ``OSError`` means a bug (or, for an ``OSError``, the
environment: see :func:`environment_error`).

Each class is also the built-in exception a Python caller would expect (a bad value is a ``ValueError``, a
missing file a ``FileNotFoundError``), so ``except ValueError`` keeps working for library users.
"""
import errno


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


class MissingFileError(InputFormatError, FileNotFoundError):
    """An input file or directory the user named (or one a named input implies, such as ``DATA/dict.txt``) does
    not exist."""


class OutputRefusedError(EtcError, ValueError):
    """An output location would replace, delete or hide an input, or something the command did not write."""


class OutputExistsError(OutputRefusedError, FileExistsError):
    """An output exists and the command was not asked to replace it (``--overwrite``)."""


class OutputWriteError(EtcError, OSError):
    """An output cannot be written where it was asked for: a full disk, a read-only or unwritable directory,
    a path under a regular file. Built as an ``OSError`` (``errno``, reason, the output path), so
    ``e.errno`` and ``e.filename`` name what failed; nothing was left half-written."""


class ExternalToolError(EtcError, RuntimeError):
    """A tool the command runs on the user's data (sentencepiece training, fairseq's binarizer, pip fetching a
    sample) refused it or failed; the message names the input and the tool's own reason."""


#: ``errno`` values of an ``OSError`` that the machine, not the program, is at fault for: a full disk or
#: quota, a read-only file system, a file the user may not read or write
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def environment_error(e: BaseException) -> bool:
    """Whether ``e`` is an ``OSError`` of the environment (:data:`ENVIRONMENT_ERRNOS`) that names its file:
    a user can fix it (free space, choose a writable directory) and the file and reason say all there is."""
    return isinstance(e, OSError) and e.errno in ENVIRONMENT_ERRNOS and e.filename is not None


def is_user_error(e: BaseException) -> bool:
    """What a command reports as one line: an :class:`EtcError` or an :func:`environment_error`."""
    return isinstance(e, EtcError) or environment_error(e)
