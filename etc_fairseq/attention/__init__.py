"""Global-local attention (ETC, paper Sec. 3.2 and Appendix A) as pure tensor functions.

- :mod:`.blocked`  the production kernel (chunked, probabilities recomputed in backward); the l2l
  layout lives there.
- :mod:`.autograd_blocked` the previous plain-autograd 3-block kernel: a second exact reference and
  a benchmark baseline.
- :mod:`.flex`     the same attention through ``torch.nn.attention.flex_attention`` (GPU path,
  chosen by :func:`etc_fairseq.attention.flex.attention_backend`).
- :mod:`.dense`    an obviously-correct O(long_len^2) reference (tests / benchmarks only).
- :mod:`.common`   shared helpers: validation, relative-logit gather, joint masked softmax.

Public entry points:

``global_local_attention(long_q, long_k, long_v, global_q, global_k, global_v, *,
local_radius, l2l_mask, l2g_mask, g2g_mask, g2l_mask, l2l_rel=None, l2g_rel=None,
g2g_rel=None, g2l_rel=None, long_rel_emb=None, global_rel_emb=None, dropout_p=0.0)``
-> ``(long_out, global_out)``; and its two halves ``long_query_attention`` /
``global_query_attention`` for callers with separate keys/values per attention piece.
"""

from .blocked import (
    band_to_blocked,
    blocked_to_band,
    global_local_attention,
    global_query_attention,
    long_query_attention,
)
from .dense import (
    dense_global_local_attention,
    dense_global_query_attention,
    dense_long_query_attention,
)

__all__ = [
    "global_local_attention",
    "long_query_attention",
    "global_query_attention",
    "dense_global_local_attention",
    "dense_long_query_attention",
    "dense_global_query_attention",
    "band_to_blocked",
    "blocked_to_band",
]
