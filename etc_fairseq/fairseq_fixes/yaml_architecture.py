"""Fix for ``fairseq.dataclass.initialize.add_defaults`` (fairseq 0.12), which ``fairseq-train`` and
``fairseq-hydra-train`` call on the composed config (the second time right after importing ``--user-dir``).

It maps an architecture name in ``model._name`` to its model (``etc_tiny`` -> ``etc``) and fills every field
the config lacks from ``EtcConfig``'s defaults, so the architecture function that runs later finds every field
set and changes nothing: a yaml ``model: {_name: etc_tiny}`` silently builds the default (base-sized) model.
The replacement first fills the fields the config leaves unset from ``checkpoint.finetune_from_model``'s stored
model config when one is given (what ``fairseq-train --finetune-from-model`` does through the architecture
functions, which ``fairseq-hydra-train`` calls on ``cfg.model`` alone), then from the named ETC architecture
(:func:`apply_yaml_architecture`), then calls the original; fields the yaml sets are kept. Command-line
``--arch`` configs arrive with every field set already and are unchanged.
"""
import functools

from .patching import Patch


def apply_yaml_architecture(cfg) -> None:
    """Fill the unset fields of ``cfg.model`` (a composed fairseq/hydra config, an omegaconf ``DictConfig``)
    in place: first from the model config stored in ``checkpoint.finetune_from_model`` when one is given
    (as ``fairseq-train --finetune-from-model`` does, :mod:`etc_fairseq.models.architectures`), then from
    the ETC architecture that ``model._name`` names; fields already set are kept. A config naming another
    model or no model is left alone; the plain ``etc`` model takes only the checkpoint's fields (fairseq
    fills the rest with the dataclass defaults). See the module docstring."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY
    from omegaconf import DictConfig, OmegaConf, open_dict

    model = cfg.get("model") if hasattr(cfg, "get") else None
    name = model if isinstance(model, str) else getattr(model, "_name", None) if model is not None else None
    if not isinstance(name, str) or ARCH_MODEL_NAME_REGISTRY.get(name) != "etc":
        return
    if isinstance(model, str):
        with open_dict(cfg):
            cfg.model = DictConfig({"_name": model})
        model = cfg.model
    if not OmegaConf.is_config(model):
        return
    checkpoint = cfg.get("checkpoint")
    finetune_from = checkpoint.get("finetune_from_model") if OmegaConf.is_config(checkpoint) else None
    # Every etc* architecture function (the plain "etc" one included) first fills the unset fields from the
    # checkpoint its args name as finetune_from_model, as on fairseq-train's command line; a yaml names it
    # under checkpoint:, so it is lent to the model node for the call (reached through fairseq's registry:
    # this module sits below etc_fairseq.models and does not import it).
    with open_dict(model):
        lent = bool(finetune_from) and "finetune_from_model" not in model
        if lent:
            model.finetune_from_model = finetune_from
        try:
            ARCH_CONFIG_REGISTRY[name](model)
        finally:
            if lent:
                del model["finetune_from_model"]


def _wrap(original):
    @functools.wraps(original)
    def add_defaults(cfg):
        apply_yaml_architecture(cfg)
        return original(cfg)

    return add_defaults


PATCHES = (Patch("fairseq.dataclass.initialize", "add_defaults", _wrap,
                 imported_by=("fairseq_cli.train", "fairseq_cli.hydra_train")),)
