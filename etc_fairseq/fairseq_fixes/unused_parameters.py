"""Fix for ``fairseq.models.DistributedFairseqModel`` (fairseq 0.12) with ``--find-unused-parameters`` and a
fine-tuning model (one with ``task_heads``).

DistributedDataParallel searches for unused parameters from the outputs of the model's ``forward``, but the
project's criterions apply the task heads to those outputs outside it, so DDP takes the heads for unused and
then sees their gradients arrive ("Expected to mark a variable ready only once", deep in the backward pass).
Fine-tuning models have no unused parameters, so the option is not needed: the replacement refuses it in one
line before DDP is built, and is otherwise fairseq's function.
"""
import functools

from etc_fairseq.errors import ConfigError

from .patching import Patch


def refuse_unused_parameter_search(args, model) -> None:
    """Raise :class:`~etc_fairseq.errors.ConfigError` for ``--find-unused-parameters`` with DDP and a model with
    task heads (see the module docstring)."""
    if (args.find_unused_parameters and args.ddp_backend in {"c10d", "pytorch_ddp"}
            and len(getattr(model, "task_heads", ())) > 0):
        raise ConfigError(
            "--find-unused-parameters does not work with the etc fine-tuning tasks and is not needed: their "
            "heads run in the criterion, outside the model's forward, where DistributedDataParallel's search "
            "for unused parameters cannot see them (it then marks the heads' parameters ready twice); every "
            "parameter of a fine-tuning model gets a gradient in every step, so leave the option out")


def _wrap(original):
    @functools.wraps(original)
    def DistributedFairseqModel(args, model, process_group, device):
        refuse_unused_parameter_search(args, model)
        return original(args, model, process_group, device)

    return DistributedFairseqModel


PATCHES = (Patch("fairseq.models", "DistributedFairseqModel", _wrap),)
