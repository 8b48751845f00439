"""Named ETC architectures (``--arch``). Values from the paper (section 4.1, appendix E).

Each function only fills fields the user did not set, so fairseq's own model flags
(``--encoder-layers``, ``--local-radius``, ...) override the architecture, as for RoBERTa.
Parameter counts (tests/test_model.py checks them within 2%): ``etc_base`` ~166M and
``etc_base_shared`` ~109M with a 30,522-token vocabulary; ``etc_large`` ~558M with RoBERTa's 50,265.
"""

from fairseq.models import register_model_architecture
from fairseq.utils import safe_getattr, safe_hasattr


def _set_default(args, name, value):
    if not safe_hasattr(args, name) or safe_getattr(args, name) is None:
        setattr(args, name, value)


def _separate_projections(args):
    """The paper's default: W^Q per side, W^K/W^V per attention piece, output projection per side."""
    for name in ("shared_q", "shared_kv", "shared_out_proj", "shared_relative_embeddings"):
        _set_default(args, name, False)
    _set_default(args, "separate_ffn", False)


def _shared_projections(args):
    """The paper's "shared" ablation: every attention projection shared by both sides and all pieces
    (the FFN is shared in every architecture)."""
    for name in ("shared_q", "shared_kv", "shared_out_proj", "shared_relative_embeddings"):
        _set_default(args, name, True)
    _set_default(args, "separate_ffn", False)


@register_model_architecture("etc", "etc_base")
def etc_base_architecture(args):
    _set_default(args, "encoder_layers", 12)
    _set_default(args, "encoder_embed_dim", 768)
    _set_default(args, "encoder_ffn_embed_dim", 3072)
    _set_default(args, "encoder_attention_heads", 12)
    _set_default(args, "local_radius", 84)
    _set_default(args, "relative_pos_max_distance", 12)
    _set_default(args, "max_positions", 4096)
    _set_default(args, "max_global_positions", 256)
    _separate_projections(args)


@register_model_architecture("etc", "etc_base_shared")
def etc_base_shared_architecture(args):
    _shared_projections(args)
    etc_base_architecture(args)


@register_model_architecture("etc", "etc_large")
def etc_large_architecture(args):
    _set_default(args, "encoder_layers", 24)
    _set_default(args, "encoder_embed_dim", 1024)
    _set_default(args, "encoder_ffn_embed_dim", 4096)
    _set_default(args, "encoder_attention_heads", 16)
    _set_default(args, "local_radius", 169)
    _set_default(args, "relative_pos_max_distance", 24)
    etc_base_architecture(args)


@register_model_architecture("etc", "etc_large_shared")
def etc_large_shared_architecture(args):
    _shared_projections(args)
    etc_large_architecture(args)


@register_model_architecture("etc", "etc_tiny")
def etc_tiny_architecture(args):
    """A few hundred thousand parameters (plus embeddings): for tests, demos and CPU smoke runs."""
    _set_default(args, "encoder_layers", 2)
    _set_default(args, "encoder_embed_dim", 64)
    _set_default(args, "encoder_ffn_embed_dim", 256)
    _set_default(args, "encoder_attention_heads", 4)
    _set_default(args, "local_radius", 16)
    _set_default(args, "relative_pos_max_distance", 4)
    _set_default(args, "max_global_positions", 64)
    _set_default(args, "fixed_block_len", 16)
    etc_base_architecture(args)


def config_for_arch(arch: str, **overrides):
    """An :class:`~etc_fairseq.models.etc.EtcConfig` for ``arch`` with ``overrides`` applied first,
    resolved exactly as ``fairseq-train --arch ARCH --flag value`` resolves it (used by tests,
    benchmarks and lifting, which build models outside fairseq's command line)."""
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

    from etc_fairseq.models.etc import EtcConfig

    if ARCH_MODEL_NAME_REGISTRY.get(arch) != "etc":
        known = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "etc")
        raise ValueError(f"unknown ETC architecture {arch!r}; known: {known}")
    unknown = set(overrides) - set(EtcConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown EtcConfig fields {sorted(unknown)}")
    args = argparse.Namespace(**overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    cfg = EtcConfig.from_namespace(args)
    cfg._name = arch
    return cfg
