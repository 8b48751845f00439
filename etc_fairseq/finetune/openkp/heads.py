"""OpenKP's heads as plain PyTorch (no fairseq; paper appendix C): the visual-feature embedding added to the
input embeddings, the keyphrase head (word-piece sums per word -> n-gram convolutions -> one logit per n-gram)
and its loss (one softmax over all n-grams of a document).

Pure functions (exactly tested) come first, then the ``nn.Module`` s. The fairseq task
(:mod:`etc_fairseq.finetune.openkp.task`) registers the modules on the model as task heads
``openkp_keyphrase`` and ``openkp_visual``; the criterion applies the loss.

Visual features: each VDOM node has 20 raw floats, 10 for the node and 10 for its parent, in the official
order (:data:`FEATURE_NAMES`). Encoded as

- the font size of node and parent in :data:`NUM_FONT_BUCKETS` = 24 buckets (:data:`FONT_SIZE_EDGES`),
  each embedded;
- the cross of (is block, is heading, is bold) of node and parent: one of 8 values each, embedded;
- every other feature (x, width, y, height, is inline, is leaf; node and parent: 12 values) dense, clipped
  to :data:`DENSE_RANGES` and rescaled linearly to [-1, 1], then a linear map to the model width.

The sum (model width) is added to each node's global token and to every long token of the node.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from etc_fairseq.encoder.layer import get_activation_fn

#: the 10 per-node features of the official VDOM ``feature`` list; the parent's follow in the same order
FEATURE_NAMES: Tuple[str, ...] = ("x", "width", "y", "height", "is_block", "is_inline", "is_heading", "is_leaf", "font_size", "is_bold")
NUM_VISUAL_FEATURES = 2 * len(FEATURE_NAMES)
_F = {name: i for i, name in enumerate(FEATURE_NAMES)}

#: 23 font-size edges (px) -> 24 buckets: bucket = number of edges <= size (0: size < 1, i.e. missing)
FONT_SIZE_EDGES: Tuple[float, ...] = (1, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 24, 26, 28, 32, 36, 42, 48, 60)
NUM_FONT_BUCKETS = len(FONT_SIZE_EDGES) + 1
#: block/heading/bold cross: index = 4 * block + 2 * heading + bold
NUM_STYLE_CROSS = 8

#: the dense features and the range each is clipped to before rescaling to [-1, 1]
DENSE_RANGES: Tuple[Tuple[str, float, float], ...] = (
    ("x", 0.0, 2000.0),
    ("width", 0.0, 2000.0),
    ("y", 0.0, 10000.0),
    ("height", 0.0, 2000.0),
    ("is_inline", 0.0, 1.0),
    ("is_leaf", 0.0, 1.0),
)
NUM_DENSE = 2 * len(DENSE_RANGES)


def font_size_bucket(size: torch.Tensor) -> torch.Tensor:
    """float [*] font sizes -> int64 [*] bucket in [0, 24): the number of :data:`FONT_SIZE_EDGES` <= size."""
    edges = torch.tensor(FONT_SIZE_EDGES, dtype=size.dtype, device=size.device)
    return torch.bucketize(size.contiguous(), edges, right=True)


def style_cross_index(is_block: torch.Tensor, is_heading: torch.Tensor, is_bold: torch.Tensor) -> torch.Tensor:
    """float [*] 0/1 flags (true = > 0.5) -> int64 [*] in [0, 8): ``4 * block + 2 * heading + bold``."""
    return 4 * (is_block > 0.5).long() + 2 * (is_heading > 0.5).long() + (is_bold > 0.5).long()


def rescale_clipped(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """float [*] -> float [*]: clip to [lo, hi], map lo -> -1 and hi -> 1 linearly."""
    return 2.0 * (x.clamp(lo, hi) - lo) / (hi - lo) - 1.0


def encode_visual_features(raw: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Official 20 raw features -> the encoded inputs.

    Args:
        raw: float [*, 20] (node's 10, then parent's 10; order :data:`FEATURE_NAMES`).
    Returns:
        font_bucket int64 [*, 2] (node, parent), style_cross int64 [*, 2] (node, parent), dense float [*, 12]
        (the node's :data:`DENSE_RANGES` features, then the parent's, each in [-1, 1]).
    """
    if raw.size(-1) != NUM_VISUAL_FEATURES:
        raise ValueError(f"visual features must have last dim {NUM_VISUAL_FEATURES}, got {tuple(raw.shape)}")
    raw = raw.float()
    buckets, crosses, dense = [], [], []
    for off in (0, len(FEATURE_NAMES)):
        f = lambda name: raw[..., off + _F[name]]  # noqa: E731  float [*]
        buckets.append(font_size_bucket(f("font_size")))
        crosses.append(style_cross_index(f("is_block"), f("is_heading"), f("is_bold")))
        dense.extend(rescale_clipped(f(name), lo, hi) for name, lo, hi in DENSE_RANGES)
    return torch.stack(buckets, -1), torch.stack(crosses, -1), torch.stack(dense, -1)


def sum_pieces_per_word(features: torch.Tensor, word_of_piece: torch.Tensor, num_words: int) -> torch.Tensor:
    """Word embeddings = sum of their word pieces' features.

    Args:
        features: float [B, L, D] long features.
        word_of_piece: int64 [B, L], word index of each piece, -1 for none (padding).
        num_words: W, the number of word slots.
    Returns:
        float [B, W, D]; words without pieces get zeros.
    """
    B, L, D = features.shape
    index = torch.where(word_of_piece >= 0, word_of_piece, torch.full_like(word_of_piece, num_words))  # [B, L]
    out = features.new_zeros(B, num_words + 1, D)
    out.scatter_add_(1, index.unsqueeze(-1).expand(B, L, D), features)
    return out[:, :num_words]  # [B, W, D]


def ngram_valid_mask(ngram_ids: torch.Tensor) -> torch.Tensor:
    """int [B, W, N] n-gram ids (-1 = past the end or padding) -> bool [B, W, N] candidate n-grams."""
    return ngram_ids >= 0


def keyphrase_targets(ngram_ids: torch.Tensor, gold_phrases: torch.Tensor, logits: Optional[torch.Tensor] = None,
                      max_loss: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """Target distribution over the n-grams of each document.

    Each gold phrase found in the document gets probability ``1 / m`` (``m`` = found gold phrases), put on
    its first occurrence (smallest start word), or with ``max_loss`` on the occurrence with the highest
    logit (the paper's "max loss": cross entropy then uses the max logit over all occurrences).

    Args:
        ngram_ids: int [B, W, N], -1 for no candidate.
        gold_phrases: int [B, K], the phrase id of each gold phrase; < 0 = absent from the document / padding.
        logits: float [B, W, N], needed with ``max_loss``.
    Returns:
        (targets float [B, W, N] (rows sum to 1, or 0 without found gold), found int64 [B] = m).
    """
    B, W, N = ngram_ids.shape
    K = gold_phrases.size(1)
    # [B, K, W, N]: n-gram (w, n) is an occurrence of gold phrase k
    occ = (ngram_ids.unsqueeze(1) == gold_phrases.view(B, K, 1, 1)) & (gold_phrases.view(B, K, 1, 1) >= 0)
    occ = occ.view(B, K, W * N)
    if max_loss:
        if logits is None:
            raise ValueError("max_loss needs the logits")
        score = logits.detach().float().reshape(B, 1, W * N).expand(B, K, W * N)
        score = score.masked_fill(~occ, float("-inf"))
    else:
        # flat index w * N + n-1: the first occurrence has the smallest start word; all occurrences of a
        # phrase have the same length, so the smallest flat index among occurrences is the first one
        pos = torch.arange(W * N, device=ngram_ids.device, dtype=torch.float).expand(B, K, W * N)
        score = (-pos).masked_fill(~occ, float("-inf"))
    has = occ.any(-1)  # [B, K]
    pick = score.argmax(-1)  # [B, K]
    found = has.sum(-1)  # [B]
    weight = has.float() / found.clamp(min=1).unsqueeze(-1).float()  # [B, K]
    targets = torch.zeros(B, W * N, device=ngram_ids.device)
    targets.scatter_add_(1, pick, weight)
    return targets.view(B, W, N), found


def keyphrase_loss(logits: torch.Tensor, valid: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross entropy of one softmax over all n-grams of each document.

    Args:
        logits: float [B, W, N]; valid: bool [B, W, N]; targets: float [B, W, N] (from :func:`keyphrase_targets`).
    Returns:
        float [B]: ``-sum(targets * log_softmax)`` per document (0 for documents without targets).
    """
    B = logits.size(0)
    flat = logits.float().reshape(B, -1).masked_fill(~valid.reshape(B, -1), float("-inf"))
    logp = torch.log_softmax(flat, dim=-1)  # [B, W*N]
    t = targets.reshape(B, -1)
    return -(t * logp.masked_fill(t == 0, 0.0)).sum(-1)


# ----------------------------------------------------------------------------------------------------------
# modules
# ----------------------------------------------------------------------------------------------------------


class VisualFeatureEmbedding(nn.Module):
    """Raw VDOM features of the nodes -> extra embeddings for the global tokens and their long tokens."""

    def __init__(self, dim: int):
        super().__init__()
        self.font = nn.ModuleList(nn.Embedding(NUM_FONT_BUCKETS, dim) for _ in range(2))  # node, parent
        self.style = nn.ModuleList(nn.Embedding(NUM_STYLE_CROSS, dim) for _ in range(2))
        self.dense = nn.Linear(NUM_DENSE, dim)
        for emb in list(self.font) + list(self.style):
            nn.init.normal_(emb.weight, std=0.02)
        nn.init.normal_(self.dense.weight, std=0.02)
        nn.init.zeros_(self.dense.bias)

    def embed_nodes(self, node_features: torch.Tensor) -> torch.Tensor:
        """float [B, G, 20] -> float [B, G, dim]."""
        bucket, cross, dense = encode_visual_features(node_features)
        x = self.dense(dense)
        for i in range(2):
            x = x + self.font[i](bucket[..., i]) + self.style[i](cross[..., i])
        return x

    def forward(self, node_features: torch.Tensor, long_segment: torch.Tensor, global_padding_mask: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Args: node_features float [B, G, 20]; long_segment int64 [B, L] (global index, -1 none);
        global_padding_mask bool [B, G].
        Returns (long_extra float [B, L, dim], global_extra float [B, G, dim]); zero for padding and for long
        tokens outside every node."""
        g = self.embed_nodes(node_features).masked_fill(global_padding_mask.unsqueeze(-1), 0.0)  # [B, G, D]
        B, L = long_segment.shape
        idx = long_segment.clamp(min=0).unsqueeze(-1).expand(B, L, g.size(-1))
        long_extra = torch.gather(g, 1, idx).masked_fill((long_segment < 0).unsqueeze(-1), 0.0)  # [B, L, D]
        return long_extra, g


class KeyphraseHead(nn.Module):
    """Word-piece features -> one logit per n-gram (n = 1..max_n) of words.

    Words are the sums of their pieces; a Conv1d with kernel n over the words gives the n-gram embeddings;
    an activation and one dense layer per n give the logits.
    """

    def __init__(self, dim: int, max_n: int = 5, activation: str = "gelu"):
        super().__init__()
        self.max_n = max_n
        self.convs = nn.ModuleList(nn.Conv1d(dim, dim, kernel_size=n) for n in range(1, max_n + 1))
        self.activation = get_activation_fn(activation)
        self.out = nn.ModuleList(nn.Linear(dim, 1) for _ in range(max_n))

    def forward(self, features: torch.Tensor, word_of_piece: torch.Tensor, num_words: int) -> torch.Tensor:
        """features float [B, L, D], word_of_piece int64 [B, L] (-1 none) -> logits float [B, W, max_n]
        (``[b, w, n-1]`` scores words ``w..w+n-1``; entries past a document's end are meaningless: mask with
        the n-gram ids)."""
        words = sum_pieces_per_word(features, word_of_piece, num_words)  # [B, W, D]
        x = F.pad(words.transpose(1, 2), (0, self.max_n - 1))  # [B, D, W + max_n - 1]
        logits = []
        for conv, out in zip(self.convs, self.out):
            h = conv(x)[:, :, :num_words].transpose(1, 2)  # [B, W, D]
            logits.append(out(self.activation(h)).squeeze(-1))  # [B, W]
        return torch.stack(logits, -1)  # [B, W, max_n]
