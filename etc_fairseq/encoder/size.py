"""How big a model a config describes, and whether this machine can hold it, computed from the config alone so
that an absurd size (a checkpoint or command line declaring 100,000 layers or a width of a million) is refused
at once instead of after minutes of building or an allocator failure after trying terabytes.

:func:`minimum_parameter_count` is a lower bound that holds for every ETC layer variant (shared or separate
projections, relative biases, pre- or post-LayerNorm): each layer has at least the query, key, value and
output projections (``4 d^2``) and the feed-forward block (``2 d f``), and the token embedding table has
``vocab x embedding width`` entries. So a refusal based on it is never wrong; the model built is larger.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from etc_fairseq.errors import ConfigError

#: bytes of one float32 parameter
FLOAT32_BYTES = 4


def minimum_parameter_count(cfg: Any, vocab_size: int = 0) -> int:
    """A lower bound on the parameters of the encoder ``cfg`` describes (see the module docstring).

    Args:
        cfg: an :class:`~etc_fairseq.encoder.config.EtcEncoderConfig` or anything with its size fields
            (``encoder_layers``, ``encoder_embed_dim``, ``encoder_ffn_embed_dim``, ``embedding_size``).
        vocab_size: rows of the token embedding table (0: leave the embeddings out).
    """
    layers, dim, ffn = (int(getattr(cfg, n)) for n in ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim"))
    width = int(getattr(cfg, "embedding_size", 0) or 0) or dim
    return layers * (4 * dim * dim + 2 * dim * ffn) + int(vocab_size) * width


def _read_int(path: str) -> Optional[int]:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available_memory() -> Optional[int]:
    """Bytes of memory this process can still use: the kernel's ``MemAvailable`` (Linux), lowered to what is
    left of a cgroup (container) limit; None where neither can be read (then nothing is refused)."""
    found = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    limit, used = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
    if limit is not None and used is not None:
        found.append(max(limit - used, 0))
    if not found and hasattr(os, "sysconf"):
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError):
            pass
    return min(found) if found else None


def gigabytes(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.1f} GB"


def check_fits_in_memory(cfg: Any, vocab_size: int = 0, where: str = "the model config") -> None:
    """Refuse a config whose parameters alone (:func:`minimum_parameter_count`, float32) exceed the memory
    available (:func:`available_memory`), before anything is allocated.

    Args:
        cfg: the config (see :func:`minimum_parameter_count`).
        vocab_size: the dictionary size, when known.
        where: what the config came from, for the message (a file and section, or the command line).
    Raises:
        ConfigError: one line naming the size fields, the bytes needed and the bytes available.
    """
    available = available_memory()
    if available is None:
        return
    need = minimum_parameter_count(cfg, vocab_size) * FLOAT32_BYTES
    if need > available:
        fields = ", ".join(f"{n}={getattr(cfg, n)}" for n in ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim"))
        raise ConfigError(
            f"{where}: {fields} describe a model of at least {minimum_parameter_count(cfg, vocab_size):,} parameters "
            f"({gigabytes(need)} in float32), more than the {gigabytes(available)} of memory available here; "
            "nothing was built"
        )
