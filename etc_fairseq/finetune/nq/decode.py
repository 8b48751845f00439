"""Natural Questions predictions (``etc-predict nq``): per-window answers from the four span logits and the
answer-type logits, aggregated over an example's windows as in paper appendix C, written in the official
prediction format.

Per window (:func:`window_prediction`), over the document positions only (CLS = "no answer" reference):

- long answer: the best start position, then the best end position at or after it; score = start + end
  logit minus the CLS start + end logits (Alberti et al.). The word span is mapped to the long-answer
  candidate that contains its first word and is closest to it (|start difference| + |end difference|;
  ties: top-level first, then the earlier candidate), since gold long answers are always candidates.
- short answer: the same, with the end at most ``max_short_words`` (38) words after the start word
  (``end_word - start_word + 1 <= 38``).
- yes/no: if the larger of the yes and no logits is above the null, short and long logits, the short
  answer is replaced by that yes/no (its score stays the short span score).

Across windows (:func:`aggregate`): the long answer of the best-scoring window and the short answer (with
its window's yes/no decision) of the best-scoring window; first window on ties. Predictions carry token
offsets only (byte offsets -1), which the official evaluation compares on tokens.
"""
from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

import torch

from etc_fairseq.commands import Subcommand
from etc_fairseq.finetune.nq.schema import TYPE_LONG, TYPE_NO, TYPE_NULL, TYPE_SHORT, TYPE_YES
from etc_fairseq.guards import positive_int

logger = logging.getLogger(__name__)

NULL_SCORE = -1e4


@dataclass
class WindowPrediction:
    """Best answers of one window: spans are ``(start_token, end_token)`` word offsets or None."""

    long_span: Optional[Tuple[int, int]] = None
    long_score: float = NULL_SCORE
    short_span: Optional[Tuple[int, int]] = None
    short_score: float = NULL_SCORE
    yes_no: str = "NONE"


def best_start_then_end(
    start_logits: torch.Tensor, end_logits: torch.Tensor, allowed: torch.Tensor, words: torch.Tensor,
    max_words: Optional[int] = None,
) -> Optional[Tuple[int, int, float]]:
    """Best start position, then the best end at or after it (within ``max_words`` words if given).

    Args:
        start_logits / end_logits: float [L]. allowed: bool [L] (document positions). words: int [L]
            (document word of each position; only read where ``allowed``).
        max_words: at most this many words from the start word to the end word, both included.
    Returns:
        (start_position, end_position, start_logit + end_logit) or None when nothing is allowed.
    """
    if not bool(allowed.any()):
        return None
    neg = torch.finfo(start_logits.dtype).min
    s = int(torch.where(allowed, start_logits, torch.full_like(start_logits, neg)).argmax())
    ok = allowed.clone()
    ok[:s] = False
    if max_words is not None:
        ok &= (words - words[s]) < max_words
    e = int(torch.where(ok, end_logits, torch.full_like(end_logits, neg)).argmax())
    return s, e, float(start_logits[s] + end_logits[e])


def snap_to_candidate(
    start_word: int, end_word: int, candidates: Sequence[Sequence[int]]
) -> Optional[Tuple[int, int]]:
    """The candidate ``(start_token, end_token)`` standing for a predicted word span ``[start_word,
    end_word)``: among candidates containing ``start_word`` (else all given), the one minimising
    ``|start - start_word| + |end - end_word|``; ties: top-level first, then the earlier one.
    ``candidates``: rows ``(start_token, end_token, top_level)``. None if there are none."""
    rows = [tuple(int(x) for x in c) for c in candidates if int(c[0]) >= 0]
    if not rows:
        return None
    containing = [c for c in rows if c[0] <= start_word < c[1]] or rows
    best = min(
        range(len(containing)),
        key=lambda i: (abs(containing[i][0] - start_word) + abs(containing[i][1] - end_word), -containing[i][2], i),
    )
    return containing[best][0], containing[best][1]


def window_prediction(
    long_logits: torch.Tensor,
    short_logits: torch.Tensor,
    type_logits: torch.Tensor,
    long_word: torch.Tensor,
    candidates: Sequence[Sequence[int]],
    max_short_words: int = 38,
) -> WindowPrediction:
    """One window's answers (see the module docstring).

    Args:
        long_logits / short_logits: float [L, 2] (start, end) of the window's long positions.
        type_logits: float [5] (null, yes, no, short, long).
        long_word: int [L], document word of each position, -1 for CLS/question/SEP/padding.
        candidates: rows (start_token, end_token, top_level) of the candidates overlapping the window
            (rows with start -1 are padding).
    """
    long_logits, short_logits = long_logits.float().cpu(), short_logits.float().cpu()
    long_word = long_word.long().cpu()
    allowed = long_word >= 0  # [L]
    out = WindowPrediction()
    lp = best_start_then_end(long_logits[:, 0], long_logits[:, 1], allowed, long_word)
    if lp is not None:
        s, e, score = lp
        span = snap_to_candidate(int(long_word[s]), int(long_word[e]) + 1, candidates)
        if span is not None:
            out.long_span = span
            out.long_score = score - float(long_logits[0, 0] + long_logits[0, 1])
    sp = best_start_then_end(short_logits[:, 0], short_logits[:, 1], allowed, long_word, max_short_words)
    if sp is not None:
        s, e, score = sp
        out.short_span = (int(long_word[s]), int(long_word[e]) + 1)
        out.short_score = score - float(short_logits[0, 0] + short_logits[0, 1])
    t = type_logits.float().cpu()
    yn = max(float(t[TYPE_YES]), float(t[TYPE_NO]))
    if yn > max(float(t[TYPE_NULL]), float(t[TYPE_SHORT]), float(t[TYPE_LONG])):
        out.yes_no = "YES" if float(t[TYPE_YES]) >= float(t[TYPE_NO]) else "NO"
        out.short_span = None
    return out


@dataclass
class ExamplePrediction(WindowPrediction):
    """An example's aggregated answer: the best windows' answers (the fields of :class:`WindowPrediction`),
    how many windows were folded in and which ones gave the long and the short answer."""

    windows: int = 0
    long_window: int = -1
    short_window: int = -1

    def update(self, w: WindowPrediction, window: Optional[int] = None) -> None:
        """Fold in one more window, in any order: a better score replaces, an equal score replaces only
        from an earlier window (``window``: its index; default: the number of windows folded in so far)."""
        k = self.windows if window is None else int(window)
        self.windows += 1

        def better(score, best, best_window):
            return score > best or (score == best and k < best_window)

        if w.long_span is not None and (self.long_span is None or better(w.long_score, self.long_score, self.long_window)):
            self.long_span, self.long_score, self.long_window = w.long_span, w.long_score, k
        has_short = w.short_span is not None or w.yes_no != "NONE"
        mine = self.short_span is not None or self.yes_no != "NONE"
        if has_short and (not mine or better(w.short_score, self.short_score, self.short_window)):
            self.short_span, self.short_score, self.yes_no, self.short_window = w.short_span, w.short_score, w.yes_no, k

    def to_official(self, example_id: Any) -> Dict[str, Any]:
        """The official prediction record (token offsets, byte offsets -1)."""

        def span(s):
            if s is None:
                return {"start_token": -1, "end_token": -1, "start_byte": -1, "end_byte": -1}
            return {"start_token": int(s[0]), "end_token": int(s[1]), "start_byte": -1, "end_byte": -1}

        return {
            "example_id": example_id,
            "long_answer": span(self.long_span),
            "long_answer_score": float(self.long_score),
            "short_answers": [span(self.short_span)] if self.short_span is not None else [],
            "short_answers_score": float(self.short_score),
            "yes_no_answer": self.yes_no,
        }


def aggregate(windows: Iterable[Tuple[Any, WindowPrediction]], window_index: Optional[Sequence[int]] = None) -> Dict[Any, ExamplePrediction]:
    """(example key, window prediction) pairs -> example key -> aggregated prediction. ``window_index``: each
    pair's window index within its example (ties go to the earlier window); default: the order given."""
    out: Dict[Any, ExamplePrediction] = {}
    for i, (key, w) in enumerate(windows):
        out.setdefault(key, ExamplePrediction()).update(w, None if window_index is None else window_index[i])
    return out


def head_logits(model, features: torch.Tensor, long_word: torch.Tensor):
    """The three NQ heads on the long features.

    Args:
        features: float [B, L, D] long features. long_word: int [B, L] (-1 off the document).
    Returns:
        (long_logits float [B, L, 2], short_logits float [B, L, 2], type_logits float [B, 5]); span logits
        are the dtype's minimum outside CLS (position 0) and the document positions.
    """
    heads = model.task_heads
    long_logits = heads["nq_long_span"](features)  # [B, L, 2]
    short_logits = heads["nq_short_span"](features)  # [B, L, 2]
    type_logits = heads["nq_answer_type"](features[:, 0])  # [B, 5]
    allowed = long_word >= 0  # [B, L]
    allowed[:, 0] = True  # CLS: the "no answer" position
    neg = torch.finfo(long_logits.dtype).min
    mask = ~allowed.unsqueeze(-1)  # [B, L, 1]
    return long_logits.masked_fill(mask, neg), short_logits.masked_fill(mask, neg), type_logits


def batch_window_predictions(sample, long_logits, short_logits, type_logits, max_short_words: int = 38):
    """Per row of a batch: ((example index, window index, number of windows), WindowPrediction).

    The logits and targets are copied to the host once, whole (on an XLA device, slicing rows first would
    run one small graph per row)."""
    tgt = sample["target"]
    long_logits, short_logits = long_logits.detach().float().cpu(), short_logits.detach().float().cpu()
    type_logits, long_word = type_logits.detach().float().cpu(), tgt["long_word"].cpu()
    candidates, window_info = tgt["candidates"].cpu(), tgt["window_info"].cpu()
    out = []
    for b in range(long_logits.size(0)):
        cands = candidates[b].view(-1, 3).tolist()
        w = window_prediction(long_logits[b], short_logits[b], type_logits[b], long_word[b], cands, max_short_words)
        out.append((tuple(int(x) for x in window_info[b, :3].tolist()), w))
    return out


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.runner import add_predict_arguments

    add_predict_arguments(p)
    p.add_argument("--max-short-words", type=positive_int, default=38, help="longest short answer in words (paper: 38)")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.data.structured import read_side
    from etc_fairseq.finetune.common.runner import iterate_outputs, load_checkpoint, parse_overrides
    from etc_fairseq.prepare.atomic import atomic_file

    model, task, _ = load_checkpoint(args.path, args.data, parse_overrides(args.model_overrides), args.device)
    side = read_side(args.data, args.split)
    pairs, order = [], []
    with torch.no_grad():
        for sample, features, extra in iterate_outputs(model, task, args.split, args.batch_size, args.device):
            ll, sl, tl = head_logits(model, features, sample["target"]["long_word"])
            for (info, w), wid in zip(batch_window_predictions(sample, ll, sl, tl, args.max_short_words), sample["id"].tolist()):
                pairs.append((side[wid]["example_id"], w))
                order.append(info[1])
    preds = aggregate(pairs, order)
    records = [p.to_official(ex_id) for ex_id, p in preds.items()]
    with atomic_file(args.output) as f:
        json.dump({"predictions": records}, f)
    n_long = sum(p.long_span is not None for p in preds.values())
    n_yn = sum(p.yes_no != "NONE" for p in preds.values())
    print(f"wrote {args.output}: {len(records)} examples from {len(pairs)} windows ({n_long} with a long answer, "
          f"{n_yn} yes/no)")
    return 0


PREDICT = Subcommand(
    name="nq",
    help="official NQ prediction JSON from a fine-tuned etc_nq checkpoint (windows aggregated)",
    description=__doc__.split("\n\n", 1)[1],
    add_arguments=_add_arguments,
    run=_run,
)
