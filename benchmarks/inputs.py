"""CONSTRUCTED inputs the benchmarks share (seeded, so every run measures the same work): the attention
setting of the paper's base model (12 heads of 64, local radius 84, 31 relative labels) and sentence lengths
for structured long inputs.
"""
from __future__ import annotations

from typing import List

BATCH, HEADS, HEAD_DIM, RADIUS = 1, 12, 64, 84
MAX_DISTANCE = 12  # relative positions clipped at +-12 -> 25 labels
NUM_LABELS = 2 * MAX_DISTANCE + 1 + 6  # + 6 structure labels = 31
BELONGS, NOT_BELONGS = 2 * MAX_DISTANCE + 1, 2 * MAX_DISTANCE + 2
#: global input length of the kernel benchmarks
GLOBAL_LEN = 256


def attention_inputs(long_len: int, global_len: int, heads: int = HEADS):
    """CONSTRUCTED inputs of one global-local attention call (seeded): ``(tensors, kwargs)`` where ``tensors``
    holds the q/k/v of both sides float32 [BATCH, HEADS, len, HEAD_DIM] and the relative-label embeddings
    float32 [NUM_LABELS, HEADS, HEAD_DIM] (leaves with gradients), and ``kwargs`` the masks and relative
    labels in the ETC layout (the last 1/32 of the long input is padding; one global token per segment).
    ``heads``: fewer heads for quick smoke runs."""
    import torch

    gen = torch.Generator().manual_seed(0)
    B, H, D, L, G, r = BATCH, heads, HEAD_DIM, long_len, global_len, RADIUS

    def leaf(*shape):
        return torch.randn(*shape, generator=gen).requires_grad_(True)

    real = torch.ones(B, L, dtype=torch.bool)
    real[:, L - L // 32 :] = False  # trailing padding of the long input
    pos = torch.arange(L)
    key = pos.view(L, 1) + torch.arange(2 * r + 1).view(1, -1) - r  # [L, 2r+1]
    key_ok = (key >= 0) & (key < L)
    key_real = real[:, key.clamp(0, L - 1)] & key_ok  # [B, L, 2r+1]
    l2l_mask = real[:, :, None] & key_real

    def rel_label(offset):
        clipped = offset.clamp(-MAX_DISTANCE, MAX_DISTANCE)
        return torch.where(clipped >= 0, clipped, MAX_DISTANCE - clipped)

    l2l_rel = rel_label(torch.arange(2 * r + 1) - r).expand(B, L, 2 * r + 1).contiguous()
    segment = (pos * max(G, 1)) // L  # each global token summarises one segment
    belongs = segment.view(L, 1) == torch.arange(G).view(1, G)  # [L, G]
    l2g_rel = torch.where(belongs, BELONGS, NOT_BELONGS).expand(B, L, G).contiguous()
    gpos = torch.arange(G)
    g2g_rel = rel_label(gpos.view(1, G) - gpos.view(G, 1)).expand(B, G, G).contiguous()
    g2l_rel = l2g_rel.transpose(1, 2).contiguous()
    kw = dict(
        local_radius=r,
        l2l_mask=l2l_mask,
        l2g_mask=real[:, :, None].expand(B, L, G).contiguous(),
        g2g_mask=torch.ones(B, G, G, dtype=torch.bool),
        g2l_mask=real[:, None, :].expand(B, G, L).contiguous(),
        l2l_rel=l2l_rel, l2g_rel=l2g_rel, g2g_rel=g2g_rel, g2l_rel=g2l_rel,
    )
    tensors = dict(
        long_q=leaf(B, H, L, D), long_k=leaf(B, H, L, D), long_v=leaf(B, H, L, D),
        global_q=leaf(B, H, G, D), global_k=leaf(B, H, G, D), global_v=leaf(B, H, G, D),
        long_rel_emb=leaf(NUM_LABELS, H, D), global_rel_emb=leaf(NUM_LABELS, H, D),
    )
    return tensors, kw


def sentence_lengths(long_len: int, num_sentences: int, seed: int = 0) -> List[int]:
    """CONSTRUCTED sentence lengths (>= 1, fixed seed) summing to ``long_len``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    w = torch.rand(num_sentences, generator=gen) + 0.5  # relative lengths in [0.5, 1.5)
    raw = (w / w.sum() * (long_len - num_sentences)).floor().long() + 1
    raw[-1] += long_len - int(raw.sum())
    return raw.tolist()
