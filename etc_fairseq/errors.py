"""The project's one error for a model file that cannot be loaded; a leaf (no imports), so the fairseq-free
core (:mod:`etc_fairseq.encoder.io`) and the fairseq-side loader (:mod:`etc_fairseq.checkpoint_io`) raise
the same class."""


class CheckpointLoadError(ValueError):
    """A model file was refused or could not be read: a fairseq checkpoint (unsafe pickle content, a config
    that names something other than what etc-fairseq builds; missing, truncated, corrupt) or a core model
    directory (``config.json`` / ``model.safetensors``: unknown or mistyped fields, tensors that do not match
    the config). The message is one line naming the file."""
