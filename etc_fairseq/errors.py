"""The project's error classes for what the user can fix; a leaf (no imports), so every layer raises the same
classes: a model file that cannot be loaded (the fairseq-free core, :mod:`etc_fairseq.encoder.io`, and the
fairseq-side loader, :mod:`etc_fairseq.checkpoint_io`), a bad input file and a refused output location
(:mod:`etc_fairseq.guards`, the readers of every dataset). The CLIs print each as one line
(:func:`etc_fairseq.cli.common.report_user_errors`)."""


class CheckpointLoadError(ValueError):
    """A model file was refused or could not be read: a fairseq checkpoint (unsafe pickle content, a config
    that names something other than what etc-fairseq builds; missing, truncated, corrupt) or a core model
    directory (``config.json`` / ``model.safetensors``: unknown or mistyped fields, tensors that do not match
    the config). The message is one line naming the file."""


class InputFormatError(ValueError):
    """An input file is missing, unreadable, or not in the layout it was expected to have (one line names
    the file, and the line, record and field where one is at fault)."""


class OutputRefusedError(ValueError):
    """An output location would replace, delete or hide an input, or something the command did not write."""
