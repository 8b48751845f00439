"""The ETC pre-training dataset: planned (packed) examples -> CPC + whole-word MLM masking -> batches.

One item = one example of :func:`~etc_fairseq.data.packing.plan_examples` (one or more independent
document chunks, "pieces"):

- long input: the word pieces of its sentences, back to back (no special tokens added);
- global input: one ``<s>`` token per sentence (type ``SENTENCE``, or ``CPC_MASK`` for CPC-masked
  sentences); or, with ``fixed_blocks``, one ``<s>`` token per ``fixed_block_len`` long tokens of each
  piece (type ``FIXED_BLOCK``, the paper's ablation, no CPC);
- structure ids: ``long_segment`` (sentence / block of each long token), ``long_example`` and
  ``global_example`` (piece ids), so packed documents never attend to each other.

Masking is drawn from ``numpy.random.default_rng([seed, epoch, index])``: the same (seed, epoch, index)
always gives the same item, a new epoch (:meth:`PretrainingDataset.set_epoch`) re-draws the masks.

Batch (:meth:`PretrainingDataset.collater`)::

    {"id": int64 [B], "nsentences": B, "ntokens": non-pad long tokens,
     "net_input": {"src_tokens": int64 [B, L], "src_lengths": int64 [B],
                   "global_tokens": int64 [B, G], "global_types": int64 [B, G],
                   "structure": {"long_segment": [B, L] (-1 at padding), "long_example": [B, L],
                                 "global_example": [B, G]}},
     "target": int64 [B, L]  (original token at MLM-picked positions, pad elsewhere),
     "cpc": {"segment_tokens": int64 [N, S] (original tokens of the CPC-masked sentences, pad-padded),
             "batch_index": int64 [N], "global_index": int64 [N]}}   (N may be 0)

With ``pad_to_fixed_length`` every shape is fixed (one XLA graph for all full batches): ``L``/``G`` are the
maxima, ``N = B * cpc_rows_per_example`` and ``S = cpc_segment_len``, and ``"cpc"`` also holds
``"valid": bool [N]`` (False for padding rows, which hold a single ``<s>`` and index global 0 of row 0).
"""
from __future__ import annotations

import logging
from typing import Dict, List, Sequence

import numpy as np
import torch
from fairseq.data import FairseqDataset

from etc_fairseq.data.batching import collate_inputs, pad_stack
from etc_fairseq.data.masking import apply_80_10_10, choose_cpc_sentences, whole_word_mask
from etc_fairseq.data.packing import Example, greedy_pack, plan_examples
from etc_fairseq.errors import ConfigError
from etc_fairseq.structure.global_tokens import MIRROR_TYPES, GlobalTokenType, global_token_id

logger = logging.getLogger(__name__)

__all__ = ["PretrainingDataset", "plan_fixed_block_examples"]


def plan_fixed_block_examples(
    doc_sentence_lengths: Sequence[Sequence[int]],
    max_long_len: int,
    max_global_len: int,
    block_len: int,
    pack: bool = True,
) -> List[Example]:
    """Examples for the fixed-blocks ablation: documents are split at sentence boundaries into chunks of at
    most ``max_long_len`` tokens, then (with ``pack``) packed while tokens fit ``max_long_len`` and the
    blocks (``ceil(chunk_tokens / block_len)`` per chunk; blocks never straddle two chunks) fit
    ``max_global_len``. Requires ``ceil(max_long_len / block_len) <= max_global_len``."""
    if block_len < 1:
        raise ConfigError(f"--fixed-block-len must be >= 1, got {block_len}")
    if -(-max_long_len // block_len) > max_global_len:
        raise ConfigError(
            f"fixed blocks: ceil(--max-long-len {max_long_len} / --fixed-block-len {block_len}) global tokens "
            f"exceed --max-global-len {max_global_len}"
        )
    pieces = [piece for (piece,) in plan_examples(doc_sentence_lengths, max_long_len, max_long_len, pack=False)]
    costs = []  # (long tokens, fixed blocks) of each chunk
    for piece in pieces:
        tokens = int(sum(min(int(n), max_long_len) for n in doc_sentence_lengths[piece.doc][piece.first : piece.end]))
        costs.append((tokens, -(-tokens // block_len)))
    return [[pieces[i] for i in group] for group in greedy_pack(costs, max_long_len, max_global_len, pack)]


class PretrainingDataset(FairseqDataset):
    """See the module docstring.

    Args:
        corpus: a :class:`~etc_fairseq.data.pretraining_corpus.PretrainingCorpus` opened with ``dictionary``.
        examples: planned examples (:func:`plan_examples` or :func:`plan_fixed_block_examples`).
        dictionary: the task dictionary (with ``<mask>``).
        max_long_len, max_global_len: input sizes (sentences longer than ``max_long_len`` are cut).
        fixed_blocks, fixed_block_len: the fixed-blocks ablation (no sentence tokens, no CPC).
        mask_prob, leave_unmasked_prob, random_token_prob: MLM (whole-word, 80/10/10).
        cpc_sentence_prob: fraction of sentences masked for CPC.
        pad_to_fixed_length: pad every batch to ``max_long_len`` / ``max_global_len``.
        seed: base seed of the masking.
    """

    def __init__(
        self,
        corpus,
        examples: List[Example],
        dictionary,
        max_long_len: int,
        max_global_len: int,
        fixed_blocks: bool = False,
        fixed_block_len: int = 16,
        mask_prob: float = 0.15,
        leave_unmasked_prob: float = 0.1,
        random_token_prob: float = 0.1,
        cpc_sentence_prob: float = 0.1,
        pad_to_fixed_length: bool = False,
        seed: int = 1,
    ):
        super().__init__()
        self.corpus = corpus
        self.examples = examples
        self.dictionary = dictionary
        self.max_long_len = int(max_long_len)
        self.max_global_len = int(max_global_len)
        self.fixed_blocks = bool(fixed_blocks)
        self.fixed_block_len = int(fixed_block_len)
        self.mask_prob = mask_prob
        self.leave_unmasked_prob = leave_unmasked_prob
        self.random_token_prob = random_token_prob
        self.cpc_sentence_prob = 0.0 if fixed_blocks else cpc_sentence_prob
        self.pad_to_fixed_length = bool(pad_to_fixed_length)
        self.seed = int(seed)
        self.epoch = 1
        self.pad = dictionary.pad()
        self.mask_idx = dictionary.index("<mask>")
        if self.mask_idx == dictionary.unk():
            raise ValueError("the dictionary has no <mask> symbol (the task adds it)")
        # global token id per GlobalTokenType: <s>, or the ids a converted source model was pretrained with
        # (``global_token_ids`` of pretrain.json, written by ``etc-prepare pretrain --from-model``)
        role_ids = getattr(corpus, "meta", {}).get("global_token_ids") or {}
        self.global_ids = np.array([dictionary.bos() if t in MIRROR_TYPES else global_token_id(dictionary, t, role_ids=role_ids)
                                    for t in GlobalTokenType], dtype=np.int64)  # [NUM_GLOBAL_TOKEN_TYPES]
        nspecial = dictionary.nspecial
        ids = np.arange(len(dictionary))
        ok = (ids >= nspecial) & (ids != self.mask_idx)
        ok &= np.array([not dictionary[i].startswith("madeupword") for i in range(len(dictionary))])
        self.random_choices = ids[ok].astype(np.int64)
        self.nspecial = nspecial
        self.never_masked = np.array([dictionary.bos(), dictionary.pad(), dictionary.eos()], dtype=np.int64)
        doc_lengths = corpus.all_doc_sentence_lengths()
        self.long_sizes = np.array(
            [sum(min(int(n), self.max_long_len) for p in ex for n in doc_lengths[p.doc][p.first : p.end]) for ex in examples],
            dtype=np.int64,
        )
        if self.fixed_blocks:
            k = self.fixed_block_len
            gs = [sum(-(-sum(min(int(n), self.max_long_len) for n in doc_lengths[p.doc][p.first : p.end]) // k) for p in ex) for ex in examples]
        else:
            gs = [sum(p.end - p.first for p in ex) for ex in examples]
        self.global_sizes = np.array(gs, dtype=np.int64)
        # fixed-length padding also fixes the CPC tensors' shapes (XLA compiles one graph): every example gets
        # ``cpc_rows_per_example`` rows (the most CPC sentences choose_cpc_sentences can pick in any example:
        # at most min(n - 1, floor(p * n) + 1) per piece of n >= 2 sentences), each ``cpc_segment_len`` long
        # (the longest sentence, cut to max_long_len); unused rows are marked invalid
        self.cpc_rows_per_example, self.cpc_segment_len = 0, 0
        if self.pad_to_fixed_length and self.cpc_sentence_prob > 0 and len(examples):
            p = self.cpc_sentence_prob
            self.cpc_rows_per_example = max(
                sum(min(n - 1, int(np.floor(p * n)) + 1) for n in (q.end - q.first for q in ex) if n >= 2) for ex in examples
            )
            self.cpc_segment_len = max(
                (min(int(n), self.max_long_len) for ex in examples for q in ex for n in doc_lengths[q.doc][q.first : q.end]),
                default=0,
            )
        if len(examples) and (self.long_sizes.max() > self.max_long_len or self.global_sizes.max() > self.max_global_len):
            raise ValueError("an example exceeds max_long_len / max_global_len (planning bug)")

    # -- fairseq batching ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.examples)

    @property
    def sizes(self) -> np.ndarray:
        """Long tokens per example (what ``--max-tokens`` counts)."""
        return self.long_sizes

    def num_tokens(self, index: int) -> int:
        return self.max_long_len if self.pad_to_fixed_length else int(self.long_sizes[index])

    def num_tokens_vec(self, indices):
        if self.pad_to_fixed_length:
            return np.full(len(indices), self.max_long_len, dtype=np.int64)
        return self.long_sizes[indices]

    def size(self, index: int) -> int:
        return int(self.long_sizes[index])

    def ordered_indices(self) -> np.ndarray:
        """By size, ties in a random order that depends on (seed, epoch)."""
        shuffle = np.random.default_rng([self.seed, self.epoch]).permutation(len(self))
        return shuffle[np.argsort(self.long_sizes[shuffle], kind="stable")]

    @property
    def supports_prefetch(self) -> bool:
        return False

    @property
    def can_reuse_epoch_itr_across_epochs(self) -> bool:
        return False  # order and masks change with the epoch

    def set_epoch(self, epoch: int):
        self.epoch = int(epoch)

    # -- items ----------------------------------------------------------------------------------------------
    def _sentences(self, example: Example):
        toks, starts, piece_of = [], [], []
        for p, piece in enumerate(example):
            a, _ = self.corpus.doc_range(piece.doc)
            for j in range(a + piece.first, a + piece.end):
                t = self.corpus.sentence(j)[: self.max_long_len]
                toks.append(t)
                starts.append(self.corpus.word_starts(t))
                piece_of.append(p)
        return toks, starts, np.asarray(piece_of, dtype=np.int64)

    def __getitem__(self, index: int) -> Dict[str, object]:
        example = self.examples[index]
        rng = np.random.default_rng([self.seed, self.epoch, int(index)])
        sents, starts, piece_of = self._sentences(example)
        lengths = np.array([len(s) for s in sents], dtype=np.int64)
        long = np.concatenate(sents) if sents else np.zeros(0, dtype=np.int64)
        word_starts = np.concatenate(starts) if starts else np.zeros(0, dtype=bool)
        sent_of_token = np.repeat(np.arange(len(sents), dtype=np.int64), lengths)
        long_example = piece_of[sent_of_token]
        cpc_global = np.zeros(0, dtype=np.int64)
        cpc_tokens: List[np.ndarray] = []
        if self.fixed_blocks:
            k = self.fixed_block_len
            long_segment = np.empty(len(long), dtype=np.int64)
            global_example = []
            for p in range(len(example)):
                pos = np.flatnonzero(long_example == p)
                nblocks = -(-len(pos) // k)
                long_segment[pos] = len(global_example) + np.arange(len(pos)) // k
                global_example.extend([p] * nblocks)
            global_example = np.asarray(global_example, dtype=np.int64)
            global_types = np.full(len(global_example), int(GlobalTokenType.FIXED_BLOCK), dtype=np.int64)
            long_cpc = np.zeros(len(long), dtype=bool)
        else:
            long_segment = sent_of_token
            global_example = piece_of
            cpc = choose_cpc_sentences(piece_of, self.cpc_sentence_prob, rng)
            global_types = np.where(cpc, int(GlobalTokenType.CPC_MASK), int(GlobalTokenType.SENTENCE)).astype(np.int64)
            long_cpc = cpc[sent_of_token]
            cpc_global = np.flatnonzero(cpc).astype(np.int64)
            cpc_tokens = [sents[i] for i in cpc_global]
        # <s>/<pad>/</s> are never picked (the corpus has none inside sentences); <unk> is an ordinary word
        eligible = ~long_cpc & ~np.isin(long, self.never_masked)
        picked = whole_word_mask(word_starts, eligible, self.mask_prob, rng)
        src = np.where(long_cpc, self.mask_idx, long)
        src = apply_80_10_10(
            src, picked, self.mask_idx, self.random_choices, rng, self.leave_unmasked_prob, self.random_token_prob
        )
        target = np.where(picked, long, self.pad)
        global_tokens = self.global_ids[global_types]
        return {
            "id": int(index),
            "source": torch.from_numpy(src.astype(np.int64)),
            "target": torch.from_numpy(target.astype(np.int64)),
            "global_tokens": torch.from_numpy(global_tokens),
            "global_types": torch.from_numpy(global_types),
            "long_segment": torch.from_numpy(long_segment),
            "long_example": torch.from_numpy(long_example),
            "global_example": torch.from_numpy(global_example),
            "cpc_global_index": torch.from_numpy(cpc_global),
            "cpc_segment_tokens": [torch.from_numpy(np.asarray(t, dtype=np.int64)) for t in cpc_tokens],
        }

    # -- batches --------------------------------------------------------------------------------------------
    def collater(self, samples: List[Dict[str, object]]) -> Dict[str, object]:
        if len(samples) == 0:
            return {}
        pad = self.pad
        bsz = len(samples)
        long_lens = [len(s["source"]) for s in samples]
        fixed = self.pad_to_fixed_length
        net_input = collate_inputs(
            [{"src_tokens": s["source"], "global_tokens": s["global_tokens"], "global_types": s["global_types"],
              "structure": {k: s[k] for k in ("long_segment", "long_example", "global_example")}} for s in samples],
            pad, long_len=self.max_long_len if fixed else None, global_len=self.max_global_len if fixed else None)
        target = pad_stack([s["target"] for s in samples], net_input["src_tokens"].size(1), pad)
        seg_list, b_idx, g_idx = [], [], []
        for i, s in enumerate(samples):
            for gi, toks in zip(s["cpc_global_index"].tolist(), s["cpc_segment_tokens"]):
                seg_list.append(toks)
                b_idx.append(i)
                g_idx.append(gi)
        cpc_batch = {}
        if self.pad_to_fixed_length:
            # static shapes: [bsz * cpc_rows_per_example, cpc_segment_len]; padding rows hold one <s> (so the
            # second encoder sees a non-empty segment) and are excluded from the loss through "valid"
            n_rows, S = bsz * self.cpc_rows_per_example, self.cpc_segment_len
            if len(seg_list) > n_rows or any(len(t) > S for t in seg_list):
                raise ValueError("CPC sentences exceed the fixed CPC shape (planning bug)")
            valid = torch.zeros(n_rows, dtype=torch.bool)
            valid[: len(seg_list)] = True
            pad_rows = n_rows - len(seg_list)
            b_idx, g_idx = b_idx + [0] * pad_rows, g_idx + [0] * pad_rows
            seg_list = seg_list + [torch.tensor([self.dictionary.bos()], dtype=torch.long)] * pad_rows
            cpc_batch["valid"] = valid
        else:
            S = max((len(t) for t in seg_list), default=0)
        segs = pad_stack(seg_list, S, pad)
        return {
            "id": torch.tensor([s["id"] for s in samples], dtype=torch.long),
            "nsentences": bsz,
            "ntokens": int(sum(long_lens)),
            "net_input": {**net_input, "src_lengths": torch.tensor(long_lens, dtype=torch.long)},
            "target": target,
            "cpc": {
                "segment_tokens": segs,
                "batch_index": torch.tensor(b_idx, dtype=torch.long),
                "global_index": torch.tensor(g_idx, dtype=torch.long),
                **cpc_batch,
            },
        }
