"""Masked-LM data: documents -> train/valid text -> sentencepiece -> fairseq binarized ``bin/``.

Output layout of :func:`prepare_mlm` (``out`` = the output directory)::

    out/raw/{train,valid}.txt      cleaned text, one paragraph per line, blank line between documents
    out/raw/{train,valid}.titles   one document title per line, in the same order
    out/spm.model, out/spm.vocab   the sentencepiece model
    out/spm/{train,valid}.txt      the same text as space-separated pieces (long paragraphs wrapped)
    out/bin/                       fairseq-preprocess output: dict.txt, {train,valid}.{bin,idx}
    out/prepare.json               arguments and statistics; written last, so it marks a finished run

``fairseq-train out/bin --task masked_lm ...`` reads ``bin/`` directly.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from etc_fairseq.data.indexed import load_split
from etc_fairseq.errors import ConfigError, MissingFileError, OutputExistsError  # noqa: F401  (OutputExistsError raised here)

from .atomic import atomic_directory, atomic_file
from .binarize import binarize
from .documents import (
    DocumentFilter,
    DocumentWriter,
    NotEnoughDocumentsError,
    PathLike,
    choose_valid_indices,
    read_text_documents,
)
from .sources import SourceStats, iter_documents
from .spm import EncodeStats, encode_document_file, load_spm, reuse_or_train_spm

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid")


@dataclass
class SplitSummary:
    """Statistics of one split.

    Attributes:
        docs / paragraphs / chars: of the cleaned text.
        lines: lines of pieces (paragraphs, plus extra lines where long ones were wrapped).
        pieces: sentencepiece pieces.
        tokens: tokens in the binarized split as fairseq counts them (pieces + one eos per line, blank
            document-separator lines included).
        unk: pieces outside the sentencepiece vocabulary.
    """

    docs: int = 0
    paragraphs: int = 0
    chars: int = 0
    lines: int = 0
    pieces: int = 0
    tokens: int = 0
    unk: int = 0


@dataclass
class MlmSummary:
    """What :func:`prepare_mlm` produced (also written to ``out/prepare.json``).

    Attributes:
        out_dir: the output directory; ``bin_dir``: fairseq data directory (``dict.txt`` inside).
        spm_model: the sentencepiece model; ``vocab_size``: fairseq dictionary size (with specials and padding).
        splits: split name -> :class:`SplitSummary`; ``skipped``: reason -> count while reading inputs.
        seconds: wall time of the run.
    """

    out_dir: str
    bin_dir: str
    spm_model: str
    vocab_size: int
    spm_vocab_size: int
    splits: Dict[str, SplitSummary] = field(default_factory=dict)
    skipped: Dict[str, int] = field(default_factory=dict)
    inputs: List[str] = field(default_factory=list)
    args: Dict[str, object] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> str:
        """The summary as indented JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=False)

    def format(self) -> str:
        """A human-readable multi-line summary (what the CLI prints)."""
        lines = [f"prepared masked-LM data in {self.out_dir} ({self.seconds:.1f} s)"]
        for name, s in self.splits.items():
            lines.append(
                f"  {name:5s}: {s.docs} docs, {s.paragraphs} paragraphs, {s.chars:,} chars, "
                f"{s.pieces:,} pieces in {s.lines} lines, {s.tokens:,} fairseq tokens, {s.unk} unk"
            )
        lines.append(f"  vocab: sentencepiece {self.spm_vocab_size} pieces, fairseq dict {self.vocab_size} entries")
        if self.skipped:
            lines.append("  skipped while reading: " + ", ".join(f"{k}={v}" for k, v in sorted(self.skipped.items())))
        lines.append(f"  sentencepiece model: {self.spm_model}")
        lines.append(f"  fairseq data:        {self.bin_dir}  (fairseq-train {self.bin_dir} --task masked_lm ...)")
        return "\n".join(lines)


def prepare_output_dir(out_dir: PathLike, overwrite: bool) -> Path:
    """Create ``out_dir``, refusing to mix a new run into an earlier one.

    Args:
        out_dir: the directory.
        overwrite: delete an existing non-empty directory first.
    Returns:
        the directory as a ``Path``.
    Raises:
        OutputExistsError: it exists, is not empty, and ``overwrite`` is False.
    """
    out = Path(out_dir).expanduser()
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise OutputExistsError(f"{out}: output directory exists and is not empty (use --overwrite to replace it)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_arguments(values: Mapping[str, object]) -> Dict[str, object]:
    """A prepare function's arguments as ``prepare.json`` records them, from its ``locals()`` taken first
    thing: paths as strings, ``inputs`` as a list of strings."""
    args = {k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()}
    args["inputs"] = [str(p) for p in values["inputs"]]
    args["out_dir"] = str(values["out_dir"])
    return args


def check_given_files(files: Sequence[Tuple[str, Optional[PathLike]]], srcdict: Optional[PathLike]) -> None:
    """Refuse a file given to a prepare run that does not exist, in one line naming it and the option it was
    given as (``files``: ``(option, path or None)`` pairs), then check ``srcdict`` as a fairseq ``dict.txt``.

    Raises:
        MissingFileError: a missing file; InputFormatError: a malformed ``srcdict``.
    """
    for name, value in files:
        if value is not None and not Path(value).is_file():
            raise MissingFileError(f"{value}: no such file (given as {name})")
    if srcdict is not None:
        from etc_fairseq.data.indexed import check_dictionary_file

        check_dictionary_file(srcdict)


def _rebase_paths(obj, staging: str, final: str):
    """``obj`` (str / list / dict / dataclass, recursively) with every string path under ``staging``
    rewritten to lie under ``final``."""
    if isinstance(obj, str):
        return final + obj[len(staging):] if obj == staging or obj.startswith(staging + os.sep) else obj
    if isinstance(obj, list):
        return [_rebase_paths(v, staging, final) for v in obj]
    if isinstance(obj, dict):
        return {k: _rebase_paths(v, staging, final) for k, v in obj.items()}
    if hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            setattr(obj, name, _rebase_paths(getattr(obj, name), staging, final))
    return obj


def staged_output_dir(prepare: Callable) -> Callable:
    """Decorator for ``prepare(inputs, out_dir, ..., overwrite=False, **kw) -> summary``: the function writes
    into a fresh staging directory next to ``out_dir`` (``.NAME.tmp-*``), which replaces ``out_dir`` by a
    rename only when it returns. A failure removes the staging directory; a kill leaves only the hidden
    staging directory (safe to delete). Either way ``out_dir`` is never half-written, and an existing
    ``out_dir`` (with ``overwrite``) is kept until the new one is complete.

    Paths in the returned summary and in ``prepare.json`` name the final directory.

    Raises:
        OutputExistsError: ``out_dir`` exists, is not empty, and ``overwrite`` is False (nothing is written).
    """

    @functools.wraps(prepare)
    def wrapper(inputs, out_dir, *args, overwrite: bool = False, **kwargs):
        final = Path(out_dir).expanduser()
        if final.exists() and (not final.is_dir() or any(final.iterdir())) and not overwrite:
            raise OutputExistsError(f"{final}: output directory exists and is not empty (use --overwrite to replace it)")
        with atomic_directory(final, overwrite=True, marker="prepare.json") as staging:
            summary = prepare(inputs, staging, *args, overwrite=True, **kwargs)
            _rebase_paths(summary, str(staging), str(final))
            meta = staging / "prepare.json"
            if meta.is_file():
                data = _rebase_paths(json.loads(meta.read_text(encoding="utf-8")), str(staging), str(final))
                if isinstance(data.get("args"), dict):
                    data["args"]["overwrite"] = overwrite
                write_json_atomic(meta, json.dumps(data, indent=2))
        if isinstance(getattr(summary, "args", None), dict):
            summary.args["overwrite"] = overwrite
        logger.info("output moved into place: %s", final)
        return summary

    return wrapper


def spool_and_split(
    docs_iter,
    raw_dir: Path,
    valid_fraction: Optional[float],
    valid_docs: Optional[int],
    seed: int,
) -> Dict[str, SplitSummary]:
    """Write documents to ``raw_dir/{train,valid}.txt`` (+ ``.titles``), split by document.

    The documents are first spooled to a temporary file so that the split can be drawn over the exact
    number of documents without holding them in memory (:func:`choose_valid_indices`); order within each
    split is input order.

    Args:
        docs_iter: iterable of documents.
        raw_dir: output directory.
        valid_fraction / valid_docs / seed: see :func:`choose_valid_indices`.
    Returns:
        split name -> :class:`SplitSummary` with docs/paragraphs/chars filled in.
    Raises:
        ValueError: fewer than 2 documents, or a bad fraction/count.
    """
    raw_dir.mkdir(parents=True, exist_ok=True)
    spool = raw_dir / ".all.txt"
    titles: List[str] = []
    with DocumentWriter(spool) as w:
        for d in docs_iter:
            w.write(d)
            titles.append(d.title)
    n = len(titles)
    valid = choose_valid_indices(n, valid_fraction=valid_fraction, valid_docs=valid_docs, seed=seed)
    writers = {s: DocumentWriter(raw_dir / f"{s}.txt") for s in SPLITS}
    title_files = {s: open(raw_dir / f"{s}.titles", "w", encoding="utf-8") for s in SPLITS}
    try:
        for i, doc in enumerate(read_text_documents(spool)):
            split = "valid" if i in valid else "train"
            writers[split].write(doc)
            title_files[split].write(titles[i].replace("\n", " ") + "\n")
    finally:
        for w in writers.values():
            w.close()
        for f in title_files.values():
            f.close()
    spool.unlink()
    return {
        s: SplitSummary(docs=writers[s].num_docs, paragraphs=writers[s].num_paragraphs, chars=writers[s].num_chars)
        for s in SPLITS
    }


@staged_output_dir
def prepare_mlm(
    inputs: Sequence[PathLike],
    out_dir: PathLike,
    vocab_size: int = 8000,
    valid_fraction: Optional[float] = 0.05,
    valid_docs: Optional[int] = None,
    max_docs: Optional[int] = None,
    workers: int = 1,
    seed: int = 1,
    min_paragraph_chars: int = 30,
    min_doc_chars: int = 200,
    spm_model_type: str = "unigram",
    character_coverage: float = 0.9995,
    spm_input_sentence_size: int = 2_000_000,
    max_line_pieces: int = 510,
    spm_model: Optional[PathLike] = None,
    srcdict: Optional[PathLike] = None,
    overwrite: bool = False,
    in_process: bool = True,
) -> MlmSummary:
    """Prepare masked-LM data from dumps/text files (see the module docstring for the output layout).

    Args:
        inputs: Wikipedia dumps and/or BERT-layout text files.
        out_dir: output directory (must be empty or absent unless ``overwrite``).
        vocab_size: sentencepiece vocabulary size.
        valid_fraction: share of documents for validation (ignored when ``valid_docs`` is given).
        valid_docs: exact number of validation documents.
        max_docs: use only the first N documents that pass the filters.
        workers: fairseq-preprocess workers.
        seed: seed for the split and for sentencepiece's line sample.
        min_paragraph_chars / min_doc_chars: length filters (:class:`DocumentFilter`).
        spm_model_type / character_coverage / spm_input_sentence_size: sentencepiece training options.
        max_line_pieces: wrap paragraphs longer than this many pieces over several lines (0 = never); the
            default 510 keeps every line within ``--tokens-per-sample 512`` (a line also gets an eos, a
            sample a bos).
        spm_model: reuse this sentencepiece model instead of training one.
        srcdict: reuse this fairseq ``dict.txt`` instead of building one from the train split.
        overwrite: replace an existing output directory.
        in_process: run fairseq-preprocess in this process (faster) rather than as a subprocess.
    Returns:
        :class:`MlmSummary`.
    Raises:
        InputFormatError: missing/unreadable/malformed inputs (the message names the file).
        OutputExistsError: ``out_dir`` holds an earlier run.
        InputFormatError / ConfigError: fewer than 2 documents survive the filters, or bad split arguments.
        SpmTrainingError / BinarizeError: from the sentencepiece / fairseq steps.
    """
    args = run_arguments(locals())
    t0 = time.monotonic()
    check_given_files((("spm_model", spm_model), ("srcdict", srcdict)), srcdict)
    out = prepare_output_dir(out_dir, overwrite)

    stats = SourceStats()
    doc_filter = DocumentFilter(min_paragraph_chars=min_paragraph_chars, min_doc_chars=min_doc_chars)
    docs = iter_documents(inputs, doc_filter=doc_filter, max_docs=max_docs, stats=stats)
    try:
        splits = spool_and_split(docs, out / "raw", valid_fraction, valid_docs, seed)
    except (ConfigError, NotEnoughDocumentsError) as e:
        raise type(e)(f"{e} (after filtering {', '.join(map(str, inputs))})") from None

    model = reuse_or_train_spm(spm_model, [out / "raw" / "train.txt"], out / "spm", vocab_size=vocab_size,
                               model_type=spm_model_type, character_coverage=character_coverage,
                               input_sentence_size=spm_input_sentence_size, seed=seed)
    sp = load_spm(model)

    for s in SPLITS:
        enc: EncodeStats = encode_document_file(sp, out / "raw" / f"{s}.txt", out / "spm" / f"{s}.txt", max_line_pieces)
        splits[s].lines, splits[s].pieces, splits[s].unk = enc.lines, enc.pieces, enc.unk
        if enc.wrapped:
            logger.info("%s: %d paragraphs longer than %d pieces were wrapped", s, enc.wrapped, max_line_pieces)

    bin_dir = binarize(
        out / "bin",
        trainpref=out / "spm" / "train.txt",
        validpref=out / "spm" / "valid.txt",
        srcdict=srcdict,
        workers=workers,
        in_process=in_process,
    )
    from etc_fairseq.data.indexed import load_dictionary

    dictionary = load_dictionary(bin_dir / "dict.txt")
    for s in SPLITS:
        ds = load_split(bin_dir, s, dictionary)  # keep a reference: see load_split's docstring
        splits[s].tokens = int(ds.sizes.sum())
        del ds

    summary = MlmSummary(
        out_dir=str(out),
        bin_dir=str(bin_dir),
        spm_model=str(model),
        vocab_size=len(dictionary),
        spm_vocab_size=sp.get_piece_size(),
        splits=splits,
        skipped=dict(stats.skipped),
        inputs=[str(p) for p in inputs],
        args=args,
        seconds=round(time.monotonic() - t0, 2),
    )
    write_json_atomic(out / "prepare.json", summary.to_json())
    logger.info("masked-LM data ready in %s (%.1f s)", out, summary.seconds)
    return summary


def write_json_atomic(path: Path, text: str) -> None:
    """Write ``text`` and a newline to ``path`` through :func:`~etc_fairseq.prepare.atomic.atomic_file` (readers
    never see half a file)."""
    with atomic_file(path) as f:
        f.write(text + "\n")
