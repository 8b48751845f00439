"""A CONSTRUCTED sentence-classification task on real text: which article does this passage come from?

This is not a published benchmark. It is built here from real Wikipedia text so that fine-tuning
(``fairseq-train --task sentence_prediction``) can be exercised end to end on real language:

- the ``num_articles`` longest documents (by cleaned characters; ties by title) become the classes,
  label ``i`` = the i-th longest (``labels.txt`` maps ids to titles);
- every paragraph of those documents becomes one example, or several when it is longer than
  ``max_example_pieces`` (windows cut at word starts); windows shorter than ``min_example_pieces`` are dropped;
- train/valid are split by paragraph within each article (seeded, stratified), so windows of one
  paragraph never straddle the split.

Output layout of :func:`prepare_article_classification`::

    out/README.txt                      states that the task is constructed, and how
    out/labels.txt                      label id <TAB> title <TAB> train examples <TAB> valid examples
    out/spm.model                       sentencepiece model (copied from --spm-model, or trained)
    out/raw/{train,valid}.input0|label  example text (detokenized) and label id, one per line
    out/spm/{train,valid}.input0|label  example pieces, and label id
    out/bin/input0/                     fairseq binarized inputs (dict.txt = the MLM dict when reused)
    out/bin/label/                      binarized labels; dict.txt lists "0".."N-1" in order so that
                                        fairseq's class index equals the label id
    out/prepare.json                    arguments and statistics (written last)

``fairseq-train out/bin --task sentence_prediction --num-classes N ...`` reads ``bin/`` directly.
"""
from __future__ import annotations

import heapq
import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from etc_fairseq.errors import ConfigError, InputFormatError

from .binarize import binarize
from .documents import Document, DocumentFilter, PathLike
from .mlm import check_given_files, prepare_output_dir, run_arguments, staged_output_dir, write_json_atomic
from .sources import SourceStats, iter_documents
from .spm import copy_model, encode_pieces, load_spm, train_spm, wrap_pieces

logger = logging.getLogger(__name__)

CONSTRUCTED_NOTE = (
    "CONSTRUCTED task (not a published benchmark): each example is a passage of real text and its label "
    "is which of the N longest input documents it was taken from."
)

SPLITS = ("train", "valid")


@dataclass
class ClassificationSummary:
    """What :func:`prepare_article_classification` produced (also in ``out/prepare.json``).

    Attributes:
        out_dir / bin_dir: output and fairseq data directories (``bin_dir/input0``, ``bin_dir/label``).
        num_classes: pass as ``--num-classes``.
        labels: label id -> title.
        examples: split -> number of examples; per_class: split -> list of counts by label id.
        spm_model: sentencepiece model used; dictionary: the input0 ``dict.txt`` (and where it came from).
    """

    out_dir: str
    bin_dir: str
    num_classes: int
    labels: List[str]
    examples: Dict[str, int]
    per_class: Dict[str, List[int]]
    spm_model: str
    dictionary: str
    dictionary_source: str
    constructed: str = CONSTRUCTED_NOTE
    skipped: Dict[str, int] = field(default_factory=dict)
    args: Dict[str, object] = field(default_factory=dict)
    seconds: float = 0.0

    def format(self) -> str:
        """A human-readable multi-line summary (what the CLI prints)."""
        lines = [
            f"prepared the CONSTRUCTED article-classification task in {self.out_dir} ({self.seconds:.1f} s)",
            f"  {self.num_classes} classes (label: title, train/valid examples):",
        ]
        for i, title in enumerate(self.labels):
            lines.append(f"    {i}: {title}  ({self.per_class['train'][i]}/{self.per_class['valid'][i]})")
        lines.append(f"  examples: train {self.examples['train']}, valid {self.examples['valid']}")
        lines.append(f"  sentencepiece model: {self.spm_model}")
        lines.append(f"  input0 dictionary:   {self.dictionary} ({self.dictionary_source})")
        lines.append(
            f"  fairseq data:        {self.bin_dir}  (fairseq-train {self.bin_dir} --task sentence_prediction "
            f"--num-classes {self.num_classes} ...)"
        )
        return "\n".join(lines)


def longest_documents(docs, n: int) -> List[Document]:
    """The ``n`` longest documents of a stream, longest first (ties: title order), in O(n) memory.

    Args:
        docs: iterable of documents.
        n: how many to keep.
    Returns:
        up to ``n`` documents sorted by decreasing character count.
    """
    heap: List[Tuple[int, str, int, Document]] = []
    for i, d in enumerate(docs):
        # Min-heap on (chars, reversed title order): the root is the one to evict first.
        key = (d.num_chars, _rev(d.title), -i, d)
        if len(heap) < n:
            heapq.heappush(heap, key)
        elif key[:3] > heap[0][:3]:
            heapq.heapreplace(heap, key)
    return [k[3] for k in sorted(heap, key=lambda k: k[:3], reverse=True)]


def _rev(title: str) -> Tuple[int, ...]:
    """A key that sorts titles in reverse order (so that, among equal lengths, the earlier title wins)."""
    return tuple(-ord(c) for c in title) + (1,)


def make_examples(
    doc: Document,
    sp,
    max_example_pieces: int,
    min_example_pieces: int,
    valid_fraction: float,
    rng: random.Random,
) -> Dict[str, List[List[str]]]:
    """Cut one document into piece windows and split them by paragraph.

    Args:
        doc: the document.
        sp: a loaded sentencepiece processor.
        max_example_pieces / min_example_pieces: window limits.
        valid_fraction: share of the document's paragraphs for validation (at least one paragraph each way
            when the document has two or more).
        rng: the seeded generator that picks validation paragraphs.
    Returns:
        split -> list of examples (each a list of pieces).
    """
    n = len(doc.paragraphs)
    k = min(max(int(round(valid_fraction * n)), 1), n - 1) if n >= 2 else 0
    order = list(range(n))
    rng.shuffle(order)
    valid = set(order[:k])
    out: Dict[str, List[List[str]]] = {s: [] for s in SPLITS}
    for i, p in enumerate(doc.paragraphs):
        for w in wrap_pieces(encode_pieces(sp, p), max_example_pieces):
            if len(w) >= min_example_pieces:
                out["valid" if i in valid else "train"].append(w)
    return out


@staged_output_dir
def prepare_article_classification(
    inputs: Sequence[PathLike],
    out_dir: PathLike,
    num_articles: int = 8,
    spm_model: Optional[PathLike] = None,
    srcdict: Optional[PathLike] = None,
    vocab_size: int = 8000,
    spm_model_type: str = "unigram",
    character_coverage: float = 0.9995,
    spm_input_sentence_size: int = 2_000_000,
    max_example_pieces: int = 254,
    min_example_pieces: int = 16,
    valid_fraction: float = 0.1,
    max_docs: Optional[int] = None,
    min_paragraph_chars: int = 30,
    min_doc_chars: int = 200,
    workers: int = 1,
    seed: int = 1,
    overwrite: bool = False,
    in_process: bool = True,
) -> ClassificationSummary:
    """Build the CONSTRUCTED article-classification task (see the module docstring).

    Args:
        inputs: Wikipedia dumps and/or BERT-layout text files.
        out_dir: output directory (must be empty or absent unless ``overwrite``).
        num_articles: number of classes (the longest documents).
        spm_model: reuse this sentencepiece model (e.g. an MLM run's ``spm.model``) so that the vocabulary
            matches a pretrained model. When ``srcdict`` is not given, the MLM run's ``bin/dict.txt`` next
            to it is used if present.
        srcdict: fairseq ``dict.txt`` for the inputs (otherwise built from the train split).
        vocab_size: sentencepiece vocabulary size when a model is trained here.
        spm_model_type / character_coverage / spm_input_sentence_size: sentencepiece training options (when a
            model is trained here).
        max_example_pieces: longest example (longer paragraphs become several windows); keep it below the
            model's max positions minus the bos/eos fairseq adds.
        min_example_pieces: shorter windows are dropped.
        valid_fraction: share of each article's paragraphs for validation.
        max_docs: read only the first N documents (the classes are the longest among those).
        min_paragraph_chars / min_doc_chars: length filters.
        workers: fairseq-preprocess workers.
        seed: seed for the split.
        overwrite: replace an existing output directory.
        in_process: run fairseq-preprocess in this process.
    Returns:
        :class:`ClassificationSummary`.
    Raises:
        InputFormatError / MissingFileError / ConfigError: bad inputs or model/dictionary paths (message names them).
        ValueError: fewer than ``num_articles`` documents, or a class without train or valid examples.
    """
    args = run_arguments(locals())
    t0 = time.monotonic()
    if num_articles < 2:
        raise ConfigError(f"--num-articles must be at least 2, got {num_articles}")
    check_given_files((("spm_model", spm_model), ("srcdict", srcdict)), srcdict)
    dictionary_source = "given"
    if spm_model is not None and srcdict is None:
        sibling = Path(spm_model).parent / "bin" / "dict.txt"
        if sibling.is_file():
            srcdict, dictionary_source = sibling, "the MLM run's dictionary next to the sentencepiece model"
            logger.info("using %s as the input dictionary (matches the MLM data)", sibling)
        else:
            logger.warning(
                "no dict.txt next to %s: the input dictionary is built from this task's train split and will "
                "not match a model pretrained on other data; pass --srcdict to reuse one", spm_model
            )
    logger.info("%s", CONSTRUCTED_NOTE)
    out = prepare_output_dir(out_dir, overwrite)

    stats = SourceStats()
    doc_filter = DocumentFilter(min_paragraph_chars=min_paragraph_chars, min_doc_chars=min_doc_chars)
    articles = longest_documents(iter_documents(inputs, doc_filter=doc_filter, max_docs=max_docs, stats=stats), num_articles)
    if len(articles) < num_articles:
        raise InputFormatError(
            f"--num-articles {num_articles} needs that many documents, but only {len(articles)} passed the "
            f"filters in {', '.join(map(str, inputs))}"
        )
    logger.info("classes: %s", "; ".join(f"{i}={d.title} ({d.num_chars} chars)" for i, d in enumerate(articles)))

    prefix = out / "spm"
    if spm_model is not None:
        model = copy_model(spm_model, prefix)
    else:
        # Train on the paragraphs of the classes only, before the split, so every class's vocabulary is
        # covered; the labels themselves are never seen by sentencepiece.
        text = out / "raw" / "spm-train.txt"
        text.parent.mkdir(parents=True, exist_ok=True)
        text.write_text("".join(p + "\n" for d in articles for p in d.paragraphs), encoding="utf-8")
        model = train_spm([text], prefix, vocab_size=vocab_size, model_type=spm_model_type,
                          character_coverage=character_coverage, input_sentence_size=spm_input_sentence_size,
                          seed=seed)
        text.unlink()
        dictionary_source = "built from this task's train split"
    sp = load_spm(model)

    rng = random.Random(seed)
    examples: Dict[str, List[Tuple[int, List[str]]]] = {s: [] for s in SPLITS}
    for label, doc in enumerate(articles):
        per = make_examples(doc, sp, max_example_pieces, min_example_pieces, valid_fraction, rng)
        for s in SPLITS:
            if not per[s]:
                raise InputFormatError(
                    f"article {doc.title!r} (label {label}) has no {s} examples of at least {min_example_pieces} "
                    "pieces; lower --min-example-pieces or use fewer/longer articles"
                )
            examples[s].extend((label, w) for w in per[s])
    # Interleave classes so the files are not sorted by label (fairseq shuffles train anyway; this keeps
    # a truncated valid set or a quick look at the files representative).
    for s in SPLITS:
        random.Random(seed + 1).shuffle(examples[s])

    for s in SPLITS:
        for sub in ("raw", "spm"):
            (out / sub).mkdir(parents=True, exist_ok=True)
        with open(out / "raw" / f"{s}.input0", "w", encoding="utf-8") as f_raw, open(
            out / "spm" / f"{s}.input0", "w", encoding="utf-8"
        ) as f_spm, open(out / "raw" / f"{s}.label", "w", encoding="utf-8") as f_lab:
            for label, w in examples[s]:
                f_raw.write(sp.decode_pieces(w) + "\n")
                f_spm.write(" ".join(w) + "\n")
                f_lab.write(f"{label}\n")
        (out / "spm" / f"{s}.label").write_bytes((out / "raw" / f"{s}.label").read_bytes())

    per_class = {s: [sum(1 for lab, _ in examples[s] if lab == i) for i in range(num_articles)] for s in SPLITS}
    with open(out / "labels.txt", "w", encoding="utf-8") as f:
        for i, d in enumerate(articles):
            f.write(f"{i}\t{d.title}\t{per_class['train'][i]}\t{per_class['valid'][i]}\n")
    label_dict = out / "label.dict.txt"
    # Listing the labels in id order (instead of letting fairseq sort them by frequency) makes fairseq's
    # class index (dictionary index - nspecial) equal to the label id.
    label_dict.write_text("".join(f"{i} {per_class['train'][i]}\n" for i in range(num_articles)), encoding="utf-8")

    bin_dir = out / "bin"
    binarize(
        bin_dir / "input0",
        trainpref=out / "spm" / "train.input0",
        validpref=out / "spm" / "valid.input0",
        srcdict=srcdict,
        workers=workers,
        in_process=in_process,
    )
    binarize(
        bin_dir / "label",
        trainpref=out / "spm" / "train.label",
        validpref=out / "spm" / "valid.label",
        srcdict=label_dict,
        workers=1,
        in_process=in_process,
    )
    label_dict.unlink()

    (out / "README.txt").write_text(_readme(articles, per_class, num_articles), encoding="utf-8")
    summary = ClassificationSummary(
        out_dir=str(out),
        bin_dir=str(bin_dir),
        num_classes=num_articles,
        labels=[d.title for d in articles],
        examples={s: len(examples[s]) for s in SPLITS},
        per_class=per_class,
        spm_model=str(model),
        dictionary=str(bin_dir / "input0" / "dict.txt"),
        dictionary_source=dictionary_source,
        skipped=dict(stats.skipped),
        args=args,
        seconds=round(time.monotonic() - t0, 2),
    )
    write_json_atomic(out / "prepare.json", json.dumps(asdict(summary), indent=2))
    logger.info("article-classification data ready in %s (%.1f s)", out, summary.seconds)
    return summary


def _readme(articles: List[Document], per_class: Dict[str, List[int]], n: int) -> str:
    rows = "\n".join(
        f"  {i}  {d.title}  (train {per_class['train'][i]}, valid {per_class['valid'][i]})" for i, d in enumerate(articles)
    )
    return f"""Article classification -- a CONSTRUCTED task
============================================

{CONSTRUCTED_NOTE}

It is not a published benchmark and its scores are not comparable to anything published. It exists to
exercise fine-tuning (fairseq --task sentence_prediction) end to end on real language. The text is real
(see the input files; the Wikipedia sample is CC BY-SA 3.0, Wikipedia contributors); only the task
(passage -> source article) was constructed, by etc_fairseq.prepare.classification:

- classes: the {n} longest input documents by cleaned characters, label 0 = longest;
- examples: each paragraph, cut into windows at word starts when long; short windows dropped;
- split: by paragraph within each article (seeded), so no paragraph is in both splits.

Labels:
{rows}

Files: labels.txt (id, title, train/valid counts), raw/ (text), spm/ (pieces), bin/input0 and bin/label
(fairseq sentence_prediction layout), prepare.json (arguments and statistics).

  fairseq-train bin --task sentence_prediction --num-classes {n} ...
"""
