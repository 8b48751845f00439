"""``etc-lift``: turn a pretrained model into an ETC checkpoint (paper section 3.6, appendix D).

    etc-lift SOURCE --out DIR/model.pt [--arch ARCH] [--dict DATA/dict.txt] [model flags]

SOURCE is detected (one line says which kind was found; :mod:`etc_fairseq.models.lifting`):

- an official ETC TensorFlow checkpoint directory (``etc_config.json``): converted weight for weight;
- a Hugging Face BERT or RoBERTa directory (``config.json`` + ``model.safetensors`` / ``pytorch_model.bin``);
- a fairseq RoBERTa checkpoint file: lifted into ``--arch`` (required for this kind only); it names no
  tokenizer, so ``--gpt2-encoder-json`` / ``--gpt2-vocab-bpe`` (GPT-2's BPE, fairseq's released RoBERTa) give it.

``--format hf`` writes a Hugging Face directory instead (``--out DIR``: ``config.json``, ``model.safetensors``,
``tokenizer.json``; ``AutoModel.from_pretrained(DIR)`` after ``import etc_fairseq.hf``), from any of these sources
and from a fairseq ``etc`` checkpoint (pre-trained or fine-tuned; ``--head`` picks the head when it has several);
a Hugging Face ETC directory as SOURCE converts back to a fairseq checkpoint (:mod:`etc_fairseq.hf.convert`).

Sources with a config of their own need no ``--arch``: it only names the architecture whose defaults fill
the fields the source does not determine (default etc_base); model flags override. Next to ``--out`` go
``dict.txt``, the tokenizer files and ``etc_tokenizer.json``, so ``EtcModel.from_pretrained(DIR,
checkpoint_file=...)`` and ``etc-prepare --from-model DIR`` find everything. The model flags are
fairseq-train's own ``--arch etc_*`` flags; the checkpoint stores the architecture and every field, which
``fairseq-train --finetune-from-model`` uses for every field its command line does not set
(:mod:`etc_fairseq.models.architectures`).

Errors that are the user's (missing or unsafe files, size or dictionary mismatches) are printed as one
line on stderr with exit status 1 and nothing is written; ``--debug`` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

logger = logging.getLogger("etc_fairseq.cli.lift")

DESCRIPTION = (
    "Turn an official ETC TensorFlow checkpoint directory, a Hugging Face BERT/RoBERTa directory or a fairseq "
    "RoBERTa checkpoint into an ETC checkpoint (the kind is detected and named). "
    "Lifting (Hugging Face, fairseq): "
    "Per layer, RoBERTa's Q, K, V and output projections are copied into every ETC copy (per side / per "
    "attention piece, or the shared one), with the feed-forward block and both layer norms; also the token "
    "embeddings, the embedding layer norm and the LM head. Relative-label and global token-type embeddings "
    "start from ETC's own initialisation. Absolute position embeddings are dropped unless "
    "--use-absolute-positions is given (then the rows both tables have are copied). Classification heads "
    "are dropped. Both current (encoder.*) and 2019 (decoder.*, emb_layer_norm, packed in_proj) fairseq "
    "RoBERTa key names are read; files are loaded with torch's weights_only=True and only "
    "argparse.Namespace (plus numpy scalars, if needed) allowed."
)

EPILOG = (
    "Then: fairseq-train DATA --user-dir user_dir --task masked_lm --criterion masked_lm --arch ARCH "
    "[the same model flags] --finetune-from-model OUT ...  (see examples/lifting/README.md)."
)


def _etc_architectures() -> List[str]:
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    import etc_fairseq.register  # noqa: F401  (registers the etc_* architectures)

    return sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "etc")


def add_model_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Add every :class:`EtcConfig` field as fairseq-train adds it (same flags, same semantics), in a group
    whose absent flags stay absent (so that the architecture fills them).

    Args:
        parser: the parser.
    Returns:
        the argument group (its actions' ``dest`` are EtcConfig field names).
    """
    from fairseq.dataclass.utils import gen_parser_from_dataclass

    from etc_fairseq.models.etc import EtcConfig

    group = parser.add_argument_group(
        "model overrides (fairseq-train's --arch etc_* flags; unset ones come from --arch)",
        argument_default=argparse.SUPPRESS,
    )
    gen_parser_from_dataclass(group, EtcConfig(), delete_default=True)
    for action in group._group_actions:
        if isinstance(action, argparse._StoreFalseAction):
            action.help = f"SETS {action.dest}=False (fairseq's convention for a field that defaults to True): {action.help}"
    return group


def build_parser() -> argparse.ArgumentParser:
    """The ``etc-lift`` argument parser."""
    from etc_fairseq.cli.common import OneLineArgumentParser

    p = OneLineArgumentParser(
        prog="etc-lift", description=DESCRIPTION, epilog=EPILOG,
    )
    p.add_argument("source", type=Path, metavar="SOURCE",
                   help="official ETC checkpoint directory (etc_config.json), Hugging Face BERT/RoBERTa directory "
                   "(config.json), or fairseq RoBERTa checkpoint file")
    p.add_argument("--arch", default=None, choices=_etc_architectures(),
                   help="ETC architecture: required for a fairseq RoBERTa checkpoint; for sources with their own "
                   "config it only fills the fields they do not determine (default etc_base)")
    p.add_argument("--encoder-dir", type=Path, default=None, metavar="DIR",
                   help="also write the encoder in the core format (model.safetensors + config.json) to DIR")
    p.add_argument("--out", type=Path, required=True, metavar="PATH",
                   help="the ETC checkpoint to write (with --format hf: the directory)")
    p.add_argument("--format", choices=("fairseq", "hf"), default="fairseq",
                   help="fairseq: an ETC checkpoint (default); hf: a Hugging Face directory (config.json, "
                   "model.safetensors, tokenizer.json; see docs/huggingface.md), also from a fairseq ETC checkpoint")
    p.add_argument("--head", default=None, metavar="HEAD",
                   help="--format hf: the one head the directory gets: lm, none (the encoder alone), "
                   "classification_heads.NAME or task_heads.NAME (default: the checkpoint's one task head, else lm; "
                   "none for official ETC, which releases no heads)")
    p.add_argument(
        "--dict", type=Path, default=None, metavar="DICT_TXT",
        help="the fine-tuning data's dict.txt: checked against the RoBERTa embedding rows the way fairseq's "
        "masked_lm task builds its dictionary (<s>,<pad>,</s>,<unk> + entries + <mask>); without it only the "
        "checkpoint's own vocabulary size is used",
    )
    p.add_argument("--gpt2-encoder-json", type=Path, default=None, metavar="FILE",
                   help="fairseq RoBERTa: GPT-2's encoder.json (with --gpt2-vocab-bpe and --dict), the tokenizer of "
                   "fairseq's released RoBERTa models; copied next to --out so EtcModel.from_pretrained and "
                   "etc-prepare --from-model cut text with it")
    p.add_argument("--gpt2-vocab-bpe", type=Path, default=None, metavar="FILE",
                   help="fairseq RoBERTa: GPT-2's vocab.bpe (with --gpt2-encoder-json)")
    p.add_argument("--split-punctuation", action="store_true", default=None,
                   help="the source model expects text pre-split as BERT's BasicTokenizer does (punctuation and "
                   "CJK characters apart, no lower-casing) before its tokenizer; recorded in etc_tokenizer.json "
                   "so etc-prepare --from-model and EtcModel.from_pretrained do it. Detected for an official "
                   "directory named like etc_large_split_punctuation")
    p.add_argument("--relative-positions-only", action="store_true",
                   help="discard the source's absolute position embeddings, as the paper's appendix D does: the "
                   "lifted model reads inputs of any length through its relative position labels, whose vectors "
                   "start fresh (like the global token-type embeddings and the CPC head), so continue pretraining "
                   "(MLM + CPC) before fine-tuning. Without it a BERT keeps its table (and its length limit, e.g. "
                   "512); a fairseq RoBERTa is lifted this way unless --use-absolute-positions")
    p.add_argument("--g2g-bias", type=float, default=None, metavar="LOGIT",
                   help="start every global -> global attention score shifted by LOGIT (e.g. -2): a learnable "
                   "relative bias (--relative-bias) on the global queries' global -> global labels, so that a "
                   "global token of a model pretrained without any starts by reading its long tokens rather than "
                   "the other global tokens (BERT/RoBERTa sources; examples/lifted_minilm/README.md)")
    p.add_argument("--global-token-piece", action="append", default=[], metavar="[ROLE=]PIECE",
                   help="the source piece the global tokens start from instead of <s> ([CLS]), e.g. [SEP]: PIECE "
                   "sets every summary role (sentence, paragraph, candidate, cpc_mask), ROLE=PIECE one role "
                   "(also cls); recorded in etc_tokenizer.json, so prepare the data with etc-prepare --from-model "
                   "on the output (repeatable; BERT/RoBERTa sources)")
    p.add_argument("--seed", type=int, default=1, help="seed for the freshly initialised tensors (default 1)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.add_argument("--drop-unknown", action="store_true",
                   help="drop RoBERTa tensors etc-lift does not recognise instead of refusing; for an official ETC "
                   "checkpoint, leave out variables outside the model's etc_document_bert/ scope (e.g. pretraining "
                   "heads), each named in the output (unknown variables inside the scope are still refused)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    add_model_arguments(p)
    return p


def model_overrides(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Tuple[Dict[str, object], List[str]]:
    """The EtcConfig overrides given on the command line, and the same as fairseq-train flags.

    Returns:
        (field -> value, flags to repeat on the fairseq-train command line).
    """
    from etc_fairseq.models.etc import EtcConfig

    fields = set(EtcConfig.__dataclass_fields__)
    overrides: Dict[str, object] = {}
    flags: List[str] = []
    for action in parser._actions:
        if action.dest not in fields or not hasattr(args, action.dest):
            continue
        value = getattr(args, action.dest)
        flag = action.option_strings[0]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            from etc_fairseq.lift import LiftError

            raise LiftError(f"{flag} {value}: must be >= 0")
        if action.dest.endswith("dropout") and not 0.0 <= value < 1.0:
            from etc_fairseq.lift import LiftError

            raise LiftError(f"{flag} {value}: a dropout probability must be in [0, 1)")
        overrides[action.dest] = value
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            flags.append(flag)
        else:
            flags += [flag, str(value)]
    return overrides, flags


def check_output(out: Path, inputs: Dict[str, Optional[Path]], overwrite: bool,
                 encoder_dir: Optional[Path] = None) -> None:
    """Refuse an ``--out`` or ``--encoder-dir`` that is, holds or sits inside one of the inputs (resolved,
    symbolic links followed), an ``--out`` that is a directory, an ``--encoder-dir`` that is a file, and (even
    with ``--overwrite``) an existing ``--out`` etc-lift did not write: ``--overwrite`` replaces only a previous
    etc-lift output. Nothing is written before these checks.

    Raises:
        LiftError / OutputRefusedError: one line naming the option and the path.
    """
    from etc_fairseq.checkpoint_io import CheckpointLoadError, load_checkpoint
    from etc_fairseq.guards import OutputRefusedError, check_outputs_against_inputs
    from etc_fairseq.lift import LiftError

    check_outputs_against_inputs({"--out": out, "--encoder-dir": encoder_dir}, inputs, file_outputs=["--out"])
    if encoder_dir is not None and encoder_dir.exists() and not encoder_dir.is_dir():
        raise OutputRefusedError(f"--encoder-dir {encoder_dir}: is a file; give the directory to write the core "
                                 "model into")
    if not out.exists():
        return
    if not overwrite:
        raise LiftError(f"{out} exists (pass --overwrite to replace it)")
    try:
        previous = load_checkpoint(out, mmap=True)
    except CheckpointLoadError:
        previous = {}
    if "lifted_from" not in (previous.get("extra_state") or {}):
        raise LiftError(f"--out {out} exists and is not a checkpoint etc-lift wrote; --overwrite replaces only those")


def check_hf_arguments(args: argparse.Namespace) -> None:
    """The options that go with ``--format hf`` only (``--head``) or with ``--format fairseq`` only
    (``--encoder-dir``).

    Raises:
        LiftError: one line naming the option.
    """
    from etc_fairseq.lift import LiftError

    if args.format != "hf" and args.head is not None:
        raise LiftError("--head goes with --format hf (the one head a Hugging Face directory holds)")
    if args.format == "hf" and args.encoder_dir is not None:
        raise LiftError("--encoder-dir goes with --format fairseq (a Hugging Face directory is the core's weights "
                        "under Hugging Face's names already)")


def read_source(args: argparse.Namespace, overrides: Dict[str, object], gpt2) -> Tuple[str, object]:
    """Detect and read SOURCE (nothing written): an etc-lift source lifted into ETC
    (:func:`etc_fairseq.models.lifting.lift_source`), or an ETC model in the other format
    (:mod:`etc_fairseq.hf.convert`: a fairseq ``etc`` checkpoint for ``--format hf``, a Hugging Face ETC directory
    for ``--format fairseq``). Returns (one-line description, the ``LiftedModel``).

    Raises:
        LiftError: an ETC model already in the asked format, or options that do not apply to it.
    """
    from etc_fairseq.lift import LiftError
    from etc_fairseq.models.lifting import ETC_KINDS, detect_source, lift_source

    kind, line = detect_source(args.source)
    if kind not in ETC_KINDS:
        from etc_fairseq.lift.global_side import parse_global_token_pieces

        return lift_source(args.source, arch=args.arch, overrides=overrides, seed=args.seed, dict_path=args.dict,
                           drop_unknown=args.drop_unknown, split_punctuation=args.split_punctuation, gpt2_files=gpt2,
                           relative_positions_only=args.relative_positions_only, g2g_bias=args.g2g_bias,
                           global_token_pieces=parse_global_token_pieces(args.global_token_piece))
    if gpt2 is not None or args.split_punctuation:
        raise LiftError(f"{args.source}: --gpt2-*/--split-punctuation are for lifting; an ETC model brings its tokenizer")
    if args.g2g_bias is not None or args.global_token_piece:
        raise LiftError(f"{args.source}: --g2g-bias/--global-token-piece are for lifting; an ETC model has its global "
                        "side already")
    from etc_fairseq.hf import convert

    if kind == "huggingface-etc":
        if args.format == "hf":
            raise LiftError(f"{args.source}: already a Hugging Face ETC directory (without --format hf, etc-lift "
                            "converts it back to a fairseq checkpoint)")
        return line, convert.lift_huggingface_etc(args.source, args.arch, overrides, args.seed)
    if args.format != "hf":
        raise LiftError(f"{args.source}: already a fairseq ETC checkpoint (--format hf exports it to Hugging Face)")
    if overrides or args.arch or args.relative_positions_only:
        raise LiftError(f"{args.source}: an ETC checkpoint stores its model; --arch, --relative-positions-only and "
                        "model flags do not apply")
    return line, convert.lift_fairseq_etc(args.source, args.dict)


def write_output(args: argparse.Namespace, lifted) -> List[Path]:
    """Write ``lifted`` in ``--format``: a fairseq checkpoint with its files, or a Hugging Face directory."""
    from etc_fairseq.models.lifting import write_lifted

    if args.format == "hf":
        from etc_fairseq.hf.convert import export_lifted, write_hf_directory

        export = export_lifted(lifted, head=args.head, where=str(args.source))
        lifted.report_lines += export.report_lines
        return write_hf_directory(export, args.out)
    return write_lifted(lifted, args.out, overwrite=args.overwrite, encoder_dir=args.encoder_dir)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``etc-lift``.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).
    Returns:
        exit status: 0 on success, 1 on a user error (one line on stderr), 2 on bad arguments.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("fairseq").setLevel(logging.WARNING)
    parser = build_parser()
    args = parser.parse_args(argv)
    from etc_fairseq.cli.common import report_user_errors

    done = {}

    def body() -> int:
        from etc_fairseq.lift import LiftError

        inputs = {"SOURCE": args.source, "--dict": args.dict, "--gpt2-encoder-json": args.gpt2_encoder_json,
                  "--gpt2-vocab-bpe": args.gpt2_vocab_bpe}
        check_hf_arguments(args)
        if args.format == "hf":
            from etc_fairseq.hf.convert import check_hf_output

            check_hf_output(args.out, inputs, args.overwrite)
        else:
            check_output(args.out, dict(inputs), args.overwrite, args.encoder_dir)
        overrides, _ = model_overrides(parser, args)
        if (args.gpt2_encoder_json is None) != (args.gpt2_vocab_bpe is None):
            raise LiftError("--gpt2-encoder-json and --gpt2-vocab-bpe go together (GPT-2 BPE needs both files)")
        gpt2 = (args.gpt2_encoder_json, args.gpt2_vocab_bpe) if args.gpt2_encoder_json is not None else None
        line, done["lifted"] = read_source(args, overrides, gpt2)
        if not args.quiet:
            print(f"etc-lift: {line}")
        done["written"] = write_output(args, done["lifted"])
        return 0

    status = report_user_errors("etc-lift", args.debug, body)
    if status:
        return status
    lifted, written = done["lifted"], done["written"]
    if not args.quiet and args.format == "hf":
        for text in lifted.report_lines:
            print(text)
        print(f"wrote {args.out} ({', '.join(p.name for p in written)})")
        print("load it with (nothing is downloaded): import etc_fairseq.hf; "
              f"transformers.AutoModel.from_pretrained({str(args.out)!r}); see docs/huggingface.md")
    elif not args.quiet:
        etc_cfg = lifted.etc_cfg
        arch = getattr(etc_cfg, "_name", None) or args.arch
        for text in lifted.report_lines:
            print(text)
        print(f"wrote {', '.join(str(p) for p in written)} (--arch {arch}, {etc_cfg.encoder_layers} layers, "
              f"width {etc_cfg.encoder_embed_dim}; every model field is stored in the checkpoint)")
        print("fine-tune / continue pretraining with (the model fields come from the checkpoint; "
              "EtcModel.from_pretrained needs no flags either):")
        for what, task in (("continued pretraining (data of etc-prepare pretrain --from-model)", "etc_pretraining"),
                           ("fine-tuning (data of etc-prepare structured --from-model)", "etc_structured")):
            criterion = "cpc_mlm" if task == "etc_pretraining" else task
            print(f"  {what}:\n    fairseq-train DATA --user-dir user_dir --task {task} --criterion {criterion} "
                  f"--arch {arch} --finetune-from-model {args.out} ...")
    return 0

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
