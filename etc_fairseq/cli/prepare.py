"""``etc-prepare``: build fairseq datasets for ETC from raw text.

Subcommands (``etc-prepare SUB --help`` for each):

  mlm                      documents -> sentencepiece -> fairseq masked_lm data (``DIR/bin``)
  article-classification   a CONSTRUCTED passage -> source-article task, fairseq sentence_prediction layout
  pretrain                 documents -> sentences (BERT layout) -> sentencepiece / GPT-2 BPE -> one fairseq
                           item per sentence + document offsets, for ETC pre-training

Adding a subcommand: a fine-tuning dataset defines ``PREPARE = Subcommand(...)`` (``add_arguments(parser)``
and ``run(args) -> int``) in ``etc_fairseq/finetune/<dataset>/convert.py``, where
:func:`etc_fairseq.commands.dataset_subcommands` finds it. Shared option groups (inputs, output, seed, workers) come from
:func:`add_input_arguments` and :func:`add_output_arguments`; :func:`resolve_inputs` turns them into files.
Errors that are the user's (missing files, malformed dumps, bad arguments) are printed as one line naming
the file, with exit status 1; ``--debug`` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from etc_fairseq.cli.common import build_parser as _build_parser, run_cli
from etc_fairseq.commands import Subcommand, dataset_subcommands
from etc_fairseq.data.prepared import ARCH_FIELDS  # the settings --arch records (etc-show draws with them)
from etc_fairseq.errors import ConfigError
from etc_fairseq.guards import fraction, non_negative_int, positive_int

logger = logging.getLogger("etc_fairseq.cli.prepare")

# Defined here so that `--help` does not need to import sentencepiece/fairseq.
DEFAULT_VOCAB_SIZE = 8000


# ---------------------------------------------------------------------------------------------------------
# shared option groups
# ---------------------------------------------------------------------------------------------------------


def add_input_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``--input`` / ``--wikipedia-sample`` / ``--cache-dir`` / filters / ``--max-docs``.

    Args:
        p: the subcommand parser.
    """
    g = p.add_argument_group("input")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--input",
        nargs="+",
        action="extend",
        metavar="FILE",
        type=Path,
        help="Wikipedia/MediaWiki XML dumps (.xml, .xml.bz2, .xml.gz; detected by content too) and/or text "
        "files with one paragraph per line and a blank line between documents (the BERT layout)",
    )
    src.add_argument(
        "--wikipedia-sample",
        action="store_true",
        help="use the real English Wikipedia sample (May 2016, about 100 articles, CC BY-SA 3.0) from the "
        "gensim==4.4.0 wheel, fetched once with pip into --cache-dir",
    )
    g.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where fetched data is kept (default: $ETC_FAIRSEQ_CACHE, else ~/.cache/etc-fairseq)",
    )
    g.add_argument("--max-docs", type=positive_int, default=None, metavar="N", help="use only the first N documents that pass the filters")
    g.add_argument(
        "--min-paragraph-chars",
        type=non_negative_int,
        default=30,
        metavar="N",
        help="drop paragraphs shorter than N characters (mostly list items and markup leftovers; default 30)",
    )
    g.add_argument("--min-doc-chars", type=non_negative_int, default=200, metavar="N", help="drop documents shorter than N characters (default 200)")


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``--out`` / ``--overwrite`` / ``--seed`` / ``--workers``.

    Args:
        p: the subcommand parser.
    """
    g = p.add_argument_group("output")
    g.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory (must be empty or absent)")
    g.add_argument("--overwrite", action="store_true", help="delete an existing output directory first")
    g.add_argument("--seed", type=int, default=1, help="seed for splits and sampling (default 1)")
    g.add_argument("--workers", type=positive_int, default=1, help="fairseq-preprocess workers (default 1)")


def add_spm_arguments(p: argparse.ArgumentParser) -> None:
    """Add the sentencepiece options (vocabulary, model type, coverage, line cap, reuse of a model).

    Args:
        p: the subcommand parser.
    """
    g = p.add_argument_group("sentencepiece")
    g.add_argument("--vocab-size", type=positive_int, default=DEFAULT_VOCAB_SIZE, help=f"sentencepiece vocabulary size (default {DEFAULT_VOCAB_SIZE})")
    g.add_argument("--spm-model-type", default="unigram", choices=["unigram", "bpe", "char", "word"], help="default unigram")
    g.add_argument("--character-coverage", type=float, default=0.9995, help="default 0.9995")
    g.add_argument(
        "--spm-input-sentence-size",
        type=positive_int,
        default=2_000_000,
        metavar="N",
        help="train sentencepiece on at most N lines (a seeded sample when there are more; default 2000000)",
    )
    g.add_argument("--spm-model", type=Path, default=None, help="reuse this sentencepiece .model instead of training one")
    g.add_argument("--srcdict", type=Path, default=None, help="reuse this fairseq dict.txt instead of building one")


def add_document_split_arguments(g) -> None:
    """Add ``--valid-fraction`` / ``--valid-docs`` (one or the other: the validation share of a text corpus,
    by document) to the argument group ``g``; :func:`_corpus_kwargs` reads them."""
    split = g.add_mutually_exclusive_group()
    split.add_argument("--valid-fraction", type=fraction, default=None, help="share of documents for validation (default 0.05)")
    split.add_argument("--valid-docs", type=positive_int, default=None, metavar="N", help="exactly N documents for validation")


def resolve_inputs(args: argparse.Namespace) -> List[Path]:
    """The input files named by :func:`add_input_arguments`' options (fetching the sample if asked).

    Args:
        args: parsed arguments.
    Returns:
        input file paths.
    """
    if args.wikipedia_sample:
        from etc_fairseq.prepare.sample_data import fetch_wikipedia_sample

        return [fetch_wikipedia_sample(args.cache_dir)]
    return list(args.input)


# ---------------------------------------------------------------------------------------------------------
# mlm
# ---------------------------------------------------------------------------------------------------------


def _shared_kwargs(args: argparse.Namespace) -> dict:
    """The options of :func:`add_input_arguments`, :func:`add_output_arguments` and :func:`add_spm_arguments`
    that every subcommand passes on unchanged, as keyword arguments of its prepare function (``--spm-model`` and
    ``--srcdict`` are left to each subcommand)."""
    return dict(
        max_docs=args.max_docs,
        workers=args.workers,
        seed=args.seed,
        min_paragraph_chars=args.min_paragraph_chars,
        min_doc_chars=args.min_doc_chars,
        vocab_size=args.vocab_size,
        spm_model_type=args.spm_model_type,
        character_coverage=args.character_coverage,
        spm_input_sentence_size=args.spm_input_sentence_size,
        overwrite=args.overwrite,
    )


def _corpus_kwargs(args: argparse.Namespace) -> dict:
    """:func:`_shared_kwargs` and the split options of the text-corpus subcommands (``mlm``, ``pretrain``)."""
    return dict(
        _shared_kwargs(args),
        valid_fraction=args.valid_fraction if args.valid_fraction is not None else 0.05,
        valid_docs=args.valid_docs,
    )


def _mlm_arguments(p: argparse.ArgumentParser) -> None:
    add_input_arguments(p)
    add_output_arguments(p)
    add_spm_arguments(p)
    g = p.add_argument_group("split and layout")
    add_document_split_arguments(g)
    g.add_argument(
        "--max-line-pieces",
        type=non_negative_int,
        default=510,
        metavar="N",
        help="wrap paragraphs longer than N pieces over several lines at word starts, so that "
        "--sample-break-mode complete never meets a line longer than --tokens-per-sample (default 510 "
        "for --tokens-per-sample 512; 0 = never wrap)",
    )


def _mlm_run(args: argparse.Namespace) -> int:
    from etc_fairseq.prepare.mlm import prepare_mlm

    summary = prepare_mlm(
        resolve_inputs(args),
        args.out,
        max_line_pieces=args.max_line_pieces,
        spm_model=args.spm_model,
        srcdict=args.srcdict,
        **_corpus_kwargs(args),
    )
    print(summary.format())
    return 0


MLM = Subcommand(
    name="mlm",
    help="documents -> sentencepiece -> fairseq masked_lm data",
    description="Prepare masked-LM pre-training data: clean documents (Wikipedia dumps or text files), split "
    "them into train/valid by document, train a sentencepiece model, encode, and binarize with fairseq. "
    "Writes DIR/raw/{train,valid}.txt, DIR/spm.model, DIR/spm/{train,valid}.txt, DIR/bin/ (dict.txt, "
    "train/valid .bin/.idx) and DIR/prepare.json. Train with: fairseq-train DIR/bin --task masked_lm ...",
    add_arguments=_mlm_arguments,
    run=_mlm_run,
)


# ---------------------------------------------------------------------------------------------------------
# article-classification
# ---------------------------------------------------------------------------------------------------------


def _cls_arguments(p: argparse.ArgumentParser) -> None:
    add_input_arguments(p)
    add_output_arguments(p)
    add_spm_arguments(p)
    g = p.add_argument_group("task")
    g.add_argument("--num-articles", type=positive_int, default=8, metavar="N", help="number of classes: the N longest documents (default 8)")
    g.add_argument(
        "--from-mlm",
        type=Path,
        default=None,
        metavar="DIR",
        help="an `etc-prepare mlm` output directory: reuse its spm.model and bin/dict.txt so that token ids "
        "match a model pretrained on it (same as --spm-model DIR/spm.model --srcdict DIR/bin/dict.txt)",
    )
    g.add_argument("--max-example-pieces", type=positive_int, default=254, metavar="N", help="longest example; longer paragraphs give several windows (default 254)")
    g.add_argument("--min-example-pieces", type=positive_int, default=16, metavar="N", help="drop shorter windows (default 16)")
    g.add_argument("--valid-fraction", type=fraction, default=0.1, help="share of each article's paragraphs for validation (default 0.1)")


def _cls_run(args: argparse.Namespace) -> int:
    from etc_fairseq.prepare.classification import prepare_article_classification

    spm_model, srcdict = args.spm_model, args.srcdict
    if args.from_mlm is not None:
        spm_model = spm_model or args.from_mlm / "spm.model"
        srcdict = srcdict or args.from_mlm / "bin" / "dict.txt"
    summary = prepare_article_classification(
        resolve_inputs(args),
        args.out,
        num_articles=args.num_articles,
        spm_model=spm_model,
        srcdict=srcdict,
        max_example_pieces=args.max_example_pieces,
        min_example_pieces=args.min_example_pieces,
        valid_fraction=args.valid_fraction,
        **_shared_kwargs(args),
    )
    print(summary.format())
    return 0


ARTICLE_CLASSIFICATION = Subcommand(
    name="article-classification",
    help="CONSTRUCTED task: which of the N longest articles a passage comes from (sentence_prediction)",
    description="Build a CONSTRUCTED sentence-classification task on real text (not a published benchmark): "
    "each example is a paragraph (or a window of a long one) and its label is which of the N longest input "
    "documents it comes from. Split by paragraph within each article. Writes DIR/bin/input0 and DIR/bin/label "
    "(fairseq sentence_prediction layout), DIR/labels.txt and DIR/README.txt. Train with: fairseq-train "
    "DIR/bin --task sentence_prediction --num-classes N ...",
    add_arguments=_cls_arguments,
    run=_cls_run,
)


# ---------------------------------------------------------------------------------------------------------
# pretrain
# ---------------------------------------------------------------------------------------------------------


def _pretrain_arguments(p: argparse.ArgumentParser) -> None:
    add_input_arguments(p)
    add_output_arguments(p)
    g = p.add_argument_group("tokenizer")
    g.add_argument(
        "--tokenizer",
        choices=["spm", "gpt2"],
        default="spm",
        help="spm: train a sentencepiece model on the train split (or reuse --spm-model); gpt2: GPT-2 byte-level "
        "BPE (RoBERTa's), from --gpt2-encoder-json/--gpt2-vocab-bpe, with RoBERTa's dict.txt as --srcdict to "
        "match a RoBERTa checkpoint's ids (default spm)",
    )
    g.add_argument("--gpt2-encoder-json", type=Path, default=None, metavar="FILE", help="GPT-2's encoder.json (--tokenizer gpt2)")
    g.add_argument("--gpt2-vocab-bpe", type=Path, default=None, metavar="FILE", help="GPT-2's vocab.bpe (--tokenizer gpt2)")
    g.add_argument("--from-model", type=Path, default=None, metavar="DIR",
                   help="an etc-lift output directory: cut the text with the converted model's tokenizer, use its "
                   "dict.txt and record the global token ids it was pretrained with (instead of --tokenizer)")
    add_spm_arguments(p)
    g = p.add_argument_group("documents and sentences")
    g.add_argument(
        "--min-sentences",
        type=positive_int,
        default=7,
        metavar="N",
        help="drop documents with fewer than N sentences (the ETC paper filters at 7; default 7)",
    )
    g.add_argument(
        "--max-sentence-pieces",
        type=non_negative_int,
        default=256,
        metavar="N",
        help="cut sentences longer than N tokens at word starts into several sentences, and count them "
        "(default 256; 0 = never)",
    )
    add_document_split_arguments(g)


def _pretrain_run(args: argparse.Namespace) -> int:
    from etc_fairseq.prepare.pretrain import prepare_pretraining

    summary = prepare_pretraining(
        resolve_inputs(args),
        args.out,
        tokenizer=args.tokenizer,
        min_sentences=args.min_sentences,
        max_sentence_pieces=args.max_sentence_pieces,
        spm_model=args.spm_model,
        srcdict=args.srcdict,
        gpt2_encoder_json=args.gpt2_encoder_json,
        gpt2_vocab_bpe=args.gpt2_vocab_bpe,
        from_model=args.from_model,
        **_corpus_kwargs(args),
    )
    print(summary.format())
    return 0


PRETRAIN = Subcommand(
    name="pretrain",
    help="documents -> sentences -> sentencepiece or GPT-2 BPE -> fairseq data for ETC pre-training",
    description="Prepare ETC pre-training data: clean documents (Wikipedia dumps or text files), split paragraphs "
    "into sentences (sentencex), drop documents with fewer than --min-sentences sentences, split train/valid by "
    "document, tokenize (sentencepiece, trained or given; or GPT-2 BPE with RoBERTa's dict.txt), and binarize "
    "with fairseq-preprocess keeping sentence and document boundaries. Writes DIR/raw/{train,valid}.txt (one "
    "sentence per line, blank line between documents), DIR/tok/{train,valid}.txt (the same, tokenized), DIR/bin/ "
    "(dict.txt; {train,valid}.bin/.idx with one item per sentence; {train,valid}.docs.npy document offsets; "
    "pretrain.json) and DIR/prepare.json. Read it with etc_fairseq.data.pretraining_corpus.PretrainingCorpus.",
    add_arguments=_pretrain_arguments,
    run=_pretrain_run,
)


SUBCOMMANDS: List[Subcommand] = [MLM, ARTICLE_CLASSIFICATION, PRETRAIN]


# ---------------------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------------------




def arch_settings(name: str) -> dict:
    """``{"arch": name, **ARCH_FIELDS}`` of a registered ETC architecture (ValueError naming the known ones)."""
    import etc_fairseq.register  # noqa: F401  (registers the etc_* architectures)
    from fairseq.models import ARCH_MODEL_REGISTRY

    from etc_fairseq.models.architectures import config_for_arch

    known = sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if a.startswith("etc"))
    if name not in known:
        raise ConfigError(f"--arch {name!r}: not an ETC architecture; expected one of {known}")
    cfg = config_for_arch(name)
    return {"arch": name, **{f: int(getattr(cfg, f)) for f in ARCH_FIELDS}}


def model_arch_settings(model_dir: Path) -> Optional[dict]:
    """``{"arch": ..., **ARCH_FIELDS, "arch_from": checkpoint}`` of the ETC checkpoint in an ``etc-lift`` output
    directory (``--from-model DIR``), or None (logged) when DIR holds none, or several that disagree."""
    from etc_fairseq.checkpoint_io import CheckpointLoadError, load_checkpoint

    found = {}
    for path in sorted(Path(model_dir).glob("*.pt")):
        try:
            model = dict((load_checkpoint(path, mmap=True).get("cfg") or {}).get("model") or {})
        except (CheckpointLoadError, AttributeError, TypeError):
            continue
        if str(model.get("_name", "")).startswith("etc") and all(isinstance(model.get(f), int) for f in ARCH_FIELDS):
            found[path] = {"arch": model["_name"], **{f: model[f] for f in ARCH_FIELDS}}
    if len({json.dumps(v, sort_keys=True) for v in found.values()}) != 1:
        logger.warning("%s: %s; prepare.json records no architecture (pass --arch)", model_dir,
                       f"checkpoints with different settings: {', '.join(p.name for p in found)}" if found
                       else "no ETC checkpoint (*.pt) found")
        return None
    path, settings = next(iter(found.items()))
    return {**settings, "arch_from": str(path)}


def _with_arch_option(sc: Subcommand) -> Subcommand:
    """``sc`` with ``--arch NAME``: checked before the conversion, then recorded in ``DIR/prepare.json``;
    without it, a ``--from-model`` directory's checkpoint gives the settings (:func:`model_arch_settings`)."""

    def add_arguments(p: argparse.ArgumentParser) -> None:
        sc.add_arguments(p)
        p.add_argument("--arch", default=None, metavar="NAME",
                       help="the ETC architecture this data is for (e.g. etc_tiny): its radius, relative-position "
                       "clipping and fixed block length are recorded in DIR/prepare.json, where etc-show reads them "
                       "(default with --from-model DIR: those of the checkpoint in DIR)")

    def run(args: argparse.Namespace) -> int:
        if args.arch:
            settings = arch_settings(args.arch)
        elif getattr(args, "from_model", None) is not None and Path(args.from_model).is_dir():
            settings = model_arch_settings(args.from_model)
        else:
            settings = None
        status = sc.run(args)
        if status == 0 and settings is not None:
            from etc_fairseq.prepare.mlm import write_json_atomic

            path = Path(args.out) / "prepare.json"
            info = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
            info.update(settings)
            write_json_atomic(path, json.dumps(info, indent=1, default=str))
        return status

    return dataclasses.replace(sc, add_arguments=add_arguments, run=run)


def build_parser() -> argparse.ArgumentParser:
    """The ``etc-prepare`` parser: :data:`SUBCOMMANDS` plus each fine-tuning dataset's ``PREPARE``, each with
    ``--arch`` (:func:`_with_arch_option`)."""
    return _build_parser(
        "etc-prepare",
        "Build fairseq datasets for ETC (etc-fairseq) from raw text and the official task files.",
        [_with_arch_option(sc) for sc in SUBCOMMANDS + dataset_subcommands("etc-prepare")],
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``etc-prepare``.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).
    Returns:
        exit status: 0 on success, 1 on a data/user error (one line on stderr), 2 on bad arguments.
    """
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
