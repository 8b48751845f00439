"""Global-local attention (ETC, paper Sec. 3.2 and Appendix A) as pure tensor functions.

- :mod:`.global_local` the one entry point, :func:`global_local_attention`, and its two halves
  (``long_query_attention`` / ``global_query_attention``, for per-piece keys/values); ``impl=``
  picks the implementation. They validate their inputs once; the implementations trust them.
- :mod:`.blocked`      the production kernel (chunked, probabilities recomputed in backward).
- :mod:`.autograd_blocked` the plain-autograd 3-block kernel: a second exact reference and a
  benchmark baseline; the 3-block skew (``band_to_blocked``) lives there.
- :mod:`.flex`         the same attention through ``torch.nn.attention.flex_attention`` (the GPU path,
  chosen by :func:`etc_fairseq.attention.flex.attention_backend`): one plan (BlockMask) per batch,
  both halves in one call per layer.
- :mod:`.dense`        an obviously-correct O(long_len^2) reference (tests / benchmarks only).
- :mod:`.common`       shared pieces: the masks container :class:`GlobalLocalStructure`, validation,
  band helpers, int64-offset table reads, relative-logit gather, joint masked softmax.

Imports run one way: ``global_local`` -> the four implementations -> ``common``.

``global_local_attention(long_q, long_k, long_v, global_q, global_k, global_v, structure, *,
long_rel_emb=None, global_rel_emb=None, long_rel_bias=None, global_rel_bias=None, dropout_p=0.0,
impl=None)`` -> ``(long_out, global_out)``; the structure's fields may also be given as keywords.
"""

from .autograd_blocked import band_to_blocked, blocked_to_band
from .common import GlobalLocalStructure
from .dense import dense_global_query_attention, dense_long_query_attention
from .global_local import (
    autograd_global_local_attention,
    dense_global_local_attention,
    flex_global_local_attention,
    global_local_attention,
    global_query_attention,
    long_query_attention,
)

__all__ = [
    "GlobalLocalStructure",
    "global_local_attention",
    "long_query_attention",
    "global_query_attention",
    "dense_global_local_attention",
    "dense_long_query_attention",
    "dense_global_query_attention",
    "autograd_global_local_attention",
    "flex_global_local_attention",
    "band_to_blocked",
    "blocked_to_band",
]
