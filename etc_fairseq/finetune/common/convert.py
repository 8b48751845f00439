"""The pipeline every ``etc-prepare <dataset>`` shares, around the dataset's own record -> arrays step:

1. the options (:func:`add_split_arguments`, :func:`add_output_arguments`) and the splits to convert
   (:func:`splits_from_args`, :func:`check_split_names`);
2. one output directory written atomically, holding a copy of the tokenizer's ``dict.txt``
   (:func:`prepared_directory`; a failed run leaves nothing behind);
3. per split, the examples written with a :class:`~etc_fairseq.data.structured.StructuredWriter`, a
   progress bar on a terminal (:mod:`etc_fairseq.progress`) and a progress line every ``log_every``
   examples (:func:`write_split`); the caller adds its counts to
   ``{split}.meta.json`` with ``writer.finalize(**counts)``;
4. one summary, ``DIR/`` :data:`SUMMARY_FILE` (dataset, tokenizer, options, per-split counts;
   :func:`write_summary`), written last;
5. what ``_run`` prints when it is done: a line per split, then ``wrote DIR`` (:func:`print_summary`).

Nothing here imports fairseq at module import time, so ``etc-prepare --help`` stays fast.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, Mapping, Optional, Sequence, Tuple, Union
from etc_fairseq.data.prepared import SUMMARY_FILE  # the summary of one run, in the output directory
from etc_fairseq.errors import ConfigError
from etc_fairseq.guards import non_negative_int

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]

#: the split options every converter offers, in order
STANDARD_SPLITS = ("train", "valid", "test")


def add_split_arguments(p: argparse.ArgumentParser, title: str, helps: Mapping[str, str], many: bool = False):
    """The ``--train`` / ``--valid`` / ``--test`` options (``helps``: split -> help), one FILE each or, with
    ``many``, one or more; returns the argument group (a converter may add more inputs to it)."""
    g = p.add_argument_group(title)
    for split in STANDARD_SPLITS:
        g.add_argument(f"--{split}", nargs="+" if many else None, type=Path, default=None, metavar="FILE", help=helps[split])
    return g


def add_output_arguments(p: argparse.ArgumentParser):
    """``--out DIR``, ``--overwrite`` and ``--log-every N``; returns the argument group."""
    g = p.add_argument_group("output")
    g.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory (written atomically)")
    g.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    g.add_argument("--log-every", type=non_negative_int, default=1000, metavar="N", help="progress line every N examples")
    return g


def check_split_names(names: Sequence[str], options: str = "--train / --valid / --test") -> None:
    """At least one split (``options``: how to give one, for the message); names unique, non-empty, without
    dots or slashes (they become file names)."""
    if not names:
        raise ConfigError(f"give at least one input split ({options})")
    if len(set(names)) != len(names):
        raise ConfigError(f"split names must be unique, got {list(names)}")
    for s in names:
        if not s or "/" in s or "." in s:
            raise ConfigError(f"bad split name {s!r} (no dots or slashes)")


def splits_from_args(args: argparse.Namespace) -> Dict[str, object]:
    """``{split: value}`` of the ``--train`` / ``--valid`` / ``--test`` options that were given, in that order."""
    splits = {name: getattr(args, name) for name in STANDARD_SPLITS if getattr(args, name, None)}
    check_split_names(list(splits))
    return splits


@contextlib.contextmanager
def prepared_directory(out_dir: PathLike, tokenizer, overwrite: bool = False) -> Iterator[Path]:
    """Write a prepared directory atomically: yields the temporary directory (renamed to ``out_dir`` when the
    block succeeds, removed when it fails), which already holds ``dict.txt``, a copy of the dictionary the
    ``tokenizer`` (:class:`~etc_fairseq.prepare.tokenizer.WordPieceTokenizer`) encodes onto."""
    from etc_fairseq.data.indexed import dictionary_path
    from etc_fairseq.prepare.atomic import atomic_directory

    if getattr(tokenizer, "dict_path", None) is None:
        raise ValueError("the tokenizer does not know its dict.txt (build it with WordPieceTokenizer.from_files)")
    with atomic_directory(out_dir, overwrite=overwrite, marker=SUMMARY_FILE) as tmp:
        shutil.copyfile(tokenizer.dict_path, dictionary_path(tmp))
        yield tmp


def write_split(
    tmp: Path,
    split: str,
    specs,
    examples: Iterable[Tuple[Mapping, Optional[dict]]],
    log_every: int = 1000,
    total: Optional[int] = None,
):
    """Write ``(arrays, side record or None)`` pairs as split ``split`` of ``tmp``.

    Args:
        specs: the :class:`~etc_fairseq.data.structured.FieldSpec` list of every stored field.
        examples: the examples, e.g. a generator that converts records and counts what it drops.
        log_every: a progress line every N examples (0: none).
        total: the number of examples (or records) if known, for the progress bar's percentage.
    Returns:
        the :class:`~etc_fairseq.data.structured.StructuredWriter`, not yet finalized (``num_examples``
        written); call ``writer.finalize(**counts)``.
    """
    from etc_fairseq.data.structured import StructuredWriter
    from etc_fairseq.progress import progress

    writer = StructuredWriter(tmp, split, specs)
    t0 = time.monotonic()
    for arrays, side in progress(examples, desc=f"writing {split}", total=total, unit="ex"):
        writer.add(arrays, side=side)
        if log_every and writer.num_examples % log_every == 0:
            logger.info(f"{split}: {writer.num_examples} examples written ({time.monotonic() - t0:.0f} s)")
    return writer


def write_summary(tmp: Path, dataset: str, tokenizer, splits: Mapping[str, dict], **options) -> Path:
    """Write ``tmp/`` :data:`SUMMARY_FILE`: ``{"dataset", **options, "tokenizer", "global_token_ids"
    (type name -> the id the examples' special global tokens carry), "from_model" (with ``--from-model``),
    "tokenizer_stats", "splits": {split: counts}}``. Returns its path."""
    info = {
        "dataset": dataset,
        **options,
        **tokenizer.describe(),
        "tokenizer_stats": str(tokenizer.stats),
        "splits": dict(splits),
    }
    path = tmp / SUMMARY_FILE
    path.write_text(json.dumps(info, indent=1, default=str) + "\n", encoding="utf-8")
    return path


def format_counts(counts: Mapping[str, object]) -> str:
    """``{"records": 3, "truncated": 0}`` -> ``"records=3, truncated=0"`` (a split's counts on one line)."""
    return ", ".join(f"{k}={v}" for k, v in counts.items())


def print_summary(
    out: PathLike,
    splits: Mapping[str, object],
    line: Callable[[object], str] = format_counts,
    notes: Sequence[str] = (),
    wrote_note: str = "",
) -> None:
    """Print a finished converter's report to stdout: ``{split}: {line(counts)}`` per split (``line`` formats
    one split's counts, by default :func:`format_counts`), then each of ``notes`` on its own line (e.g.
    ``"tokenizer: ..."``), then ``wrote {out}``, followed by `` ({wrote_note})`` when one is given."""
    for split, counts in splits.items():
        print(f"{split}: {line(counts)}")
    for note in notes:
        print(note)
    print(f"wrote {out}" + (f" ({wrote_note})" if wrote_note else ""))
