"""OpenKP (MS MARCO OpenKP) keyphrase metrics: P/R/F1 @1, @3, @5, as the leaderboard's evaluation defines
them (reimplemented from the definition, see below), and ``etc-evaluate openkp``.

Definition (per document, then averaged over every document of the gold file):

- A phrase is a list of words; it is *normalised* by lower-casing every word and joining the words with
  one space each, as they are: an empty word or a word holding spaces keeps them, so ``["web", "",
  "application"]`` is ``"web  application"`` (two spaces) and matches neither ``["web", "application"]`` nor
  anything but itself, exactly as in the official script; only trailing whitespace is stripped. Phrases with
  no words, or whose first word is empty, are dropped (before anything else).
- Predictions are de-duplicated (first occurrence kept, order preserved); gold phrases are de-duplicated too.
- ``hits@k`` = how many of the first ``k`` predictions are gold phrases. ``P@k = hits@k / k`` (always ``k``,
  even with fewer than ``k`` predictions), ``R@k = hits@k / #distinct gold``, ``F1@k`` their harmonic mean
  (0 when both are 0).
- Prediction and gold files must hold the same set of urls (else the files are "not comparable").

Files: the gold file is the official OpenKP jsonl (``url``, ``KeyPhrases`` = a list of word lists; other
fields such as ``text``/``VDOM`` are ignored); the prediction file is jsonl ``{"url": ...,
"KeyPhrases": [[w, ...], ...]}`` as ``etc-predict openkp`` writes it. A phrase given as one string instead of
a word list is refused with an error naming the file, line and url (the official script would join the
string's characters and score it 0; refusing is better than scoring it differently, silently).
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple

from etc_fairseq.commands import Subcommand
from etc_fairseq.finetune.openkp.schema import Phrase, parse_keyphrases
from etc_fairseq.progress import progress
from etc_fairseq.prepare.documents import InputFormatError

logger = logging.getLogger(__name__)

#: the cut-offs of the official metric
KS: Tuple[int, ...] = (1, 3, 5)

def normalize_phrase(words: Phrase) -> str:
    """``["Doctor", "Appointment"]`` -> ``"doctor appointment"`` (each word lower-cased, joined with one
    space, trailing whitespace stripped; spaces inside the words are kept).

    Raises:
        ValueError: ``words`` is a string (see :func:`~etc_fairseq.finetune.openkp.schema.parse_keyphrases`).
    """
    if isinstance(words, str):
        raise ValueError(f"keyphrase {words!r} is a string; expected a list of words")
    return " ".join(w.lower() for w in words).rstrip()


def clean_phrases(phrases: Sequence[Phrase]) -> List[str]:
    """Drop empty phrases (no words, or an empty first word), normalise the rest (order kept, no dedup)."""
    return [normalize_phrase(p) for p in phrases if isinstance(p, str) or (len(p) > 0 and len(p[0]) > 0)]


def dedup(phrases: Sequence[str]) -> List[str]:
    """Keep the first occurrence of each phrase, in order."""
    seen = set()
    out = []
    for p in phrases:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def precision_recall_at(predicted: Sequence[str], gold: Sequence[str], max_k: int = 5) -> Tuple[List[float], List[float]]:
    """P@k and R@k for k = 1..max_k of one document.

    Args:
        predicted: normalised predicted phrases, best first (de-duplicated here).
        gold: normalised gold phrases (de-duplicated here); at least one.
    Returns:
        (precision, recall): lists of ``max_k`` floats; entry ``k-1`` is the value at ``k``.
    Raises:
        ValueError: no gold phrase (recall undefined).
    """
    gold_set = set(dedup(gold))
    if not gold_set:
        raise ValueError("no gold keyphrase: recall is undefined")
    predicted = dedup(predicted)
    precision, recall = [], []
    hits = 0
    for i in range(max_k):
        if i < len(predicted) and predicted[i] in gold_set:
            hits += 1
        precision.append(hits / (i + 1))
        recall.append(hits / len(gold_set))
    return precision, recall


def f1(p: float, r: float) -> float:
    """Harmonic mean, 0 when ``p + r == 0``."""
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def score_document(predicted: Sequence[Phrase], gold: Sequence[Phrase], ks: Sequence[int] = KS) -> Dict[str, float]:
    """``{"P@1", "R@1", "F1@1", "P@3", ...}`` of one document from raw phrases (word lists)."""
    p, r = precision_recall_at(clean_phrases(predicted), clean_phrases(gold), max(ks))
    out = {}
    for k in ks:
        out[f"P@{k}"] = p[k - 1]
        out[f"R@{k}"] = r[k - 1]
        out[f"F1@{k}"] = f1(p[k - 1], r[k - 1])
    return out


def evaluate(predictions: Mapping[str, Sequence[Phrase]], gold: Mapping[str, Sequence[Phrase]], ks: Sequence[int] = KS) -> Dict[str, float]:
    """Average :func:`score_document` over the gold urls.

    Args:
        predictions: url -> predicted phrases (best first).
        gold: url -> gold phrases.
    Returns:
        ``{"P@1": ..., "R@1": ..., "F1@1": ..., ..., "num_documents": n}``.
    Raises:
        InputFormatError: the url sets differ (names some), or a gold document has no keyphrase.
    """
    missing = sorted(set(gold) - set(predictions))
    extra = sorted(set(predictions) - set(gold))
    if missing or extra:
        raise InputFormatError(
            f"predictions and gold are not comparable: {len(missing)} gold urls without a prediction "
            f"{missing[:3]}, {len(extra)} predicted urls not in the gold file {extra[:3]}"
        )
    if not gold:
        raise InputFormatError("the gold file holds no document")
    totals: Dict[str, float] = {}
    for url, gold_phrases in progress(gold.items(), desc="evaluating", total=len(gold), unit="doc"):
        if not clean_phrases(gold_phrases):
            raise InputFormatError(f"gold url {url!r}: field 'KeyPhrases' has no non-empty keyphrase")
        for key, value in score_document(predictions[url], gold_phrases, ks).items():
            totals[key] = totals.get(key, 0.0) + value
    n = len(gold)
    result = {key: value / n for key, value in totals.items()}
    result["num_documents"] = n
    return result


# ----------------------------------------------------------------------------------------------------------
# files
# ----------------------------------------------------------------------------------------------------------


def load_keyphrase_file(path: Path, what: str) -> Dict[str, List[Phrase]]:
    """url -> KeyPhrases of a jsonl file (gold: the official OpenKP file; or a prediction file).

    Raises:
        InputFormatError: unreadable file, bad JSON, missing ``url``/``KeyPhrases`` or a repeated url (names
        the file, line and field).
    """
    from etc_fairseq.guards import iter_json_lines

    path = Path(path)
    out: Dict[str, List[Phrase]] = {}
    for at, item in iter_json_lines(path, f"an OpenKP {what} jsonl file"):
        if not isinstance(item, dict):
            raise InputFormatError(f"{at}: expected a JSON object, got {type(item).__name__}")
        url = item.get("url")
        if not isinstance(url, str):
            raise InputFormatError(f"{at}: field 'url' missing or not a string")
        where = f"{at} (url {url!r})"
        if "KeyPhrases" not in item:
            raise InputFormatError(f"{where}: field 'KeyPhrases' missing")
        if url in out:
            raise InputFormatError(f"{where}: url repeated (each url must occur once)")
        out[url] = parse_keyphrases(item["KeyPhrases"], where)
    return out


def format_result(result: Mapping[str, float], ks: Sequence[int] = KS) -> str:
    """One line per cut-off: ``@3  P 0.3333  R 0.5000  F1 0.4000``."""
    lines = [f"documents: {int(result['num_documents'])}"]
    for k in ks:
        lines.append(f"@{k}  P {result[f'P@{k}']:.4f}  R {result[f'R@{k}']:.4f}  F1 {result[f'F1@{k}']:.4f}")
    return "\n".join(lines)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from etc_fairseq.finetune.common.evaluate import add_evaluate_arguments

    add_evaluate_arguments(p, 'jsonl {"url": ..., "KeyPhrases": [[w, ...], ...]}',
                           "the official OpenKP jsonl (url, KeyPhrases, ...)")


def _run(args: argparse.Namespace) -> int:
    from etc_fairseq.finetune.common.evaluate import report_metrics

    result = evaluate(load_keyphrase_file(args.predictions, "prediction"), load_keyphrase_file(args.gold, "gold"))
    report_metrics(format_result(result), json.dumps(result), args.output)
    return 0


EVALUATE = Subcommand(
    name="openkp",
    help="OpenKP keyphrase P/R/F1 @1, @3, @5 (official definition)",
    description="Score an OpenKP prediction jsonl ({url, KeyPhrases}) against the official OpenKP gold jsonl: "
    "predictions and gold lower-cased and de-duplicated; P@k = hits in the top k / k, R@k = hits / number of "
    "gold phrases, F1@k their harmonic mean; averaged over the gold documents.",
    add_arguments=_add_arguments,
    run=_run,
)
