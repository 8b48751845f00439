"""``etc-show``: draw one prepared example's attention structure as a PNG (paper figures 2-3).

    etc-show DATA [--split S] [--index N] [--arch ARCH | --radius R --max-distance K] [--hard-g2l]
             [--max-tokens N] --out example.png

``DATA`` is any prepared directory; its kind is detected from its files (or given with ``--kind``):

``pretrain``    the ``bin/`` of ``etc-prepare pretrain`` (``pretrain.json``): the example is built by the
                ``etc_pretraining`` task's dataset with ``--max-long-len`` / ``--max-global-len``
                (packing and all); one global token per sentence, packed documents never attend across.
``structured``  a fine-tuning directory (``{split}.meta.json``, :mod:`etc_fairseq.data.structured`:
                HotpotQA, WikiHop, NQ, OpenKP, ...): the stored long/global tokens and structure ids.
``masked_lm``   fairseq ``masked_lm`` data (``{split}.bin/.idx`` + ``dict.txt``): the task's blocks of
                ``--tokens-per-sample`` tokens (``--sample-break-mode``), with the fixed-block global tokens
                the model builds itself (one per ``--fixed-block-len`` long tokens).

Cells are coloured by relative label (legend: every label name), masked cells are white. Long inputs
are drawn as the banded l2l window (long queries x 2r+1 relative offsets) next to the g2g, g2l and l2g
blocks. The radius ``r``, the clipping distance ``k`` and the fixed block length come from ``--arch``, else
from what ``etc-prepare --arch`` (or ``--from-model``: that model's checkpoint) recorded in ``prepare.json``
(in DATA or its parent), else from ``etc_base`` (said in the title and the log); ``--radius`` /
``--max-distance`` / ``--fixed-block-len`` override them.

Token text is the data's dictionary symbols (sentencepiece pieces as they are; GPT-2 ids decoded through
``encoder.json`` when one is found: ``--gpt2-encoder-json``, the tokenizer files named in a pretrain
``pretrain.json``, or ``encoder.json`` / ``gpt2/encoder.json`` in DATA or its parent).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from etc_fairseq.cli.common import OneLineArgumentParser
from etc_fairseq.errors import ConfigError, InputFormatError, MissingFileError
from etc_fairseq.guards import non_negative_int, positive_int

logger = logging.getLogger("etc_fairseq.cli.show")

KINDS = ("pretrain", "structured", "masked_lm")


@dataclass
class LoadedExample:
    """One example, unbatched, as :func:`etc_fairseq.visualize.label_grids` wants it.

    Attributes:
        long_tokens: int64 ``[L]`` dictionary ids (the original text: pretraining masks are undone).
        global_tokens: int64 ``[G]``; global_types: int64 ``[G]`` (:class:`GlobalTokenType`).
        structure: compact ids (``long_segment`` ``[L]``, ``global_parent`` ``[G]``, ... ``long_links``
            ``[L, K]``), only those the data defines.
        description: one line naming the data, split, index and kind.
    """

    long_tokens: np.ndarray
    global_tokens: np.ndarray
    global_types: np.ndarray
    structure: Dict[str, np.ndarray]
    description: str
    #: ``[G]`` each global token's type name where the data names its own types (``etc-prepare structured
    #: --global-type``: the side records' ``type_names``), else None
    global_names: Optional[List[str]] = None


# ---------------------------------------------------------------------------------------------------------
# data kinds
# ---------------------------------------------------------------------------------------------------------
def detect_kind(data: Path) -> str:
    """``pretrain`` / ``structured`` / ``masked_lm`` from the files in ``data`` (FileNotFoundError if none)."""
    if not data.is_dir():
        raise MissingFileError(f"{data}: no such directory")
    if (data / "pretrain.json").is_file():
        return "pretrain"
    if any(data.glob("*.meta.json")):
        return "structured"
    if (data / "dict.txt").is_file() and any(data.glob("*.idx")):
        return "masked_lm"
    raise InputFormatError(
        f"{data}: not a prepared directory (expected pretrain.json of `etc-prepare pretrain`, "
        "{split}.meta.json of a fine-tuning dataset, or dict.txt + {split}.bin/.idx of fairseq masked_lm data)"
    )


def available_splits(data: Path, kind: str) -> List[str]:
    """Split names present in ``data`` for ``kind``."""
    if kind == "structured":
        return sorted(p.name[: -len(".meta.json")] for p in data.glob("*.meta.json"))
    if kind == "pretrain":
        return sorted(p.name[: -len(".docs.npy")] for p in data.glob("*.docs.npy"))
    return sorted(p.stem for p in data.glob("*.idx"))


def choose_split(data: Path, kind: str, split: Optional[str]) -> str:
    """``split`` if present, else ``valid`` / ``train`` / the only split; ValueError naming the choices."""
    splits = available_splits(data, kind)
    if split is not None:
        if split not in splits:
            raise MissingFileError(f"{data}: no {kind} split {split!r} (splits present: {splits})")
        return split
    for s in ("valid", "train"):
        if s in splits:
            return s
    if len(splits) == 1:
        return splits[0]
    raise ConfigError(f"{data}: choose a split with --split (splits present: {splits})")


def _check_index(index: int, n: int, where: str) -> None:
    if not 0 <= index < n:
        raise ConfigError(f"{where}: --index {index} out of range (the split has {n} examples: 0..{n - 1})")


def load_pretrain_example(data: Path, split: str, index: int, max_long_len: int, max_global_len: int,
                          seed: int = 1) -> LoadedExample:
    """Example ``index`` of the ``etc_pretraining`` task's dataset (as ``fairseq-train`` builds it with
    ``--max-long-len`` / ``--max-global-len`` / ``--seed``). The long tokens shown are the original ones
    (MLM and CPC masking undone); CPC-masked sentences keep their ``CPC_MASK`` global type."""
    from etc_fairseq.pretraining.task import EtcPretrainingConfig, EtcPretrainingTask

    cfg = EtcPretrainingConfig(data=str(data), max_long_len=max_long_len, max_global_len=max_global_len, seed=seed)
    task = EtcPretrainingTask.setup_task(cfg)
    task.load_dataset(split)
    ds = task.datasets[split]
    _check_index(index, len(ds), f"{data} {split}")
    item = ds[index]
    pad = task.dictionary.pad()
    src = item["source"].numpy()
    target = item["target"].numpy()
    long = np.where(target != pad, target, src)  # [L]: MLM-picked positions hold the original in target
    seg = item["long_segment"].numpy()
    for g, toks in zip(item["cpc_global_index"].tolist(), item["cpc_segment_tokens"]):
        pos = np.flatnonzero(seg == g)  # CPC sentence g: every long token was masked
        long[pos] = toks.numpy()[: len(pos)]
    return LoadedExample(
        long_tokens=long.astype(np.int64),
        global_tokens=item["global_tokens"].numpy().astype(np.int64),
        global_types=item["global_types"].numpy().astype(np.int64),
        structure={
            "long_segment": seg.astype(np.int64),
            "long_example": item["long_example"].numpy().astype(np.int64),
            "global_example": item["global_example"].numpy().astype(np.int64),
        },
        description=(
            f"{data} [{split}] example {index} of {len(ds)} (etc_pretraining, max long {max_long_len}, "
            f"max global {max_global_len}; {int(item['long_example'].max()) + 1 if len(src) else 0} packed piece(s))"
        ),
    )


def load_structured_example(data: Path, split: str, index: int) -> LoadedExample:
    """Example ``index`` of a structured fine-tuning directory (:class:`StructuredDataset`, core fields)."""
    from etc_fairseq.data.indexed import load_dictionary

    from etc_fairseq.data.structured import StructuredDataset

    if not (data / "dict.txt").is_file():
        raise MissingFileError(f"{data / 'dict.txt'}: missing (a prepared fine-tuning directory holds its dictionary)")
    pad = load_dictionary(data / "dict.txt").pad()
    ds = StructuredDataset(data, split, (), pad_idx=pad)
    _check_index(index, len(ds), f"{data} {split}")
    # copies: the items are views into fairseq's memory map, which is closed when ``ds`` is collected
    item = {k: np.array(v, dtype=np.int64, copy=True) for k, v in ds[index].items() if k != "id"}
    structure = {k: item[k] for k in (
        "long_segment", "global_parent", "long_context", "global_context", "long_links", "global_hard_g2l") if k in item}
    dataset_name = ds.meta.get("dataset") or ds.meta.get("task") or _prepared_dataset_name(data) or "structured"
    side = _side_record(data, split, index) if ds.meta.get("has_side") else None
    record_id = _record_id(side)
    if record_id is not None:
        dataset_name += f", record {record_id}"
    names = side.get("type_names") if isinstance(side, dict) else None
    if not (isinstance(names, list) and len(names) == len(item["global_tokens"]) and all(isinstance(n, str) for n in names)):
        names = None
    return LoadedExample(
        long_tokens=item["long_tokens"],
        global_tokens=item["global_tokens"],
        global_types=item["global_types"],
        structure=structure,
        description=f"{data} [{split}] example {index} of {len(ds)} ({dataset_name})",
        global_names=names,
    )


def _prepared_dataset_name(data: Path) -> Optional[str]:
    """``dataset`` of ``DATA/prepare.json`` (what ``etc-prepare <dataset>`` records), if any."""
    try:
        name = json.loads((data / "prepare.json").read_text(encoding="utf-8")).get("dataset")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return str(name) if name else None


def _side_record(data: Path, split: str, index: int) -> Optional[dict]:
    """Side record ``index`` (read through the one side reader, :class:`~etc_fairseq.data.structured.SideRecords`),
    or None when it cannot be read (the picture does not need it)."""
    from etc_fairseq.data.structured import SideRecords, side_path

    try:
        side = SideRecords(side_path(data, split))
        return side[index] if index < len(side) else None
    except (OSError, ValueError):
        return None


def _side_record_id(data: Path, split: str, index: int) -> Optional[str]:
    """The record id (``id`` / ``_id`` / ``example_id``) of side record ``index``, if the side data has one."""
    return _record_id(_side_record(data, split, index))


def _record_id(rec: Optional[dict]) -> Optional[str]:
    """The record id (``id`` / ``_id`` / ``example_id``) of a side record, if it has one."""
    for key in ("id", "_id", "example_id"):
        if isinstance(rec, dict) and rec.get(key) is not None:
            return str(rec[key])
    return None


def load_masked_lm_example(data: Path, split: str, index: int, tokens_per_sample: int, sample_break_mode: str,
                           fixed_block_len: int) -> LoadedExample:
    """Block ``index`` of fairseq's ``masked_lm`` task (before masking and shuffling: ``<s>`` + up to
    ``tokens_per_sample - 1`` tokens), with the fixed-block global tokens :class:`EtcEncoder` builds when a
    task gives no global input."""
    import torch
    from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

    from etc_fairseq.structure.builders import fixed_block_ids
    from etc_fairseq.structure.global_tokens import GlobalTokenType, special_global_token_id

    cfg = MaskedLMConfig(data=str(data), tokens_per_sample=tokens_per_sample, sample_break_mode=sample_break_mode, seed=1)
    task = MaskedLMTask.setup_task(cfg)
    ds = task._load_dataset_split(split, 1, False)  # PrependTokenDataset(TokenBlockDataset): unmasked, in order
    _check_index(index, len(ds), f"{data} {split}")
    long = ds[index].numpy().astype(np.int64)  # [L]
    seg, G, _ = fixed_block_ids(torch.zeros(1, len(long), dtype=torch.bool), fixed_block_len)
    gid = special_global_token_id(task.source_dictionary)
    return LoadedExample(
        long_tokens=long,
        global_tokens=np.full(G, gid, dtype=np.int64),
        global_types=np.full(G, int(GlobalTokenType.FIXED_BLOCK), dtype=np.int64),
        structure={"long_segment": seg[0].numpy()},
        description=(
            f"{data} [{split}] block {index} of {len(ds)} (masked_lm, tokens per sample {tokens_per_sample}, "
            f"break mode {sample_break_mode}; fixed blocks of {fixed_block_len})"
        ),
    )


# ---------------------------------------------------------------------------------------------------------
# token text
# ---------------------------------------------------------------------------------------------------------
def token_texts(ids: Sequence[int], dictionary, gpt2_decoder: Optional[dict]) -> List[str]:
    """Dictionary symbols of ``ids``, GPT-2 ids decoded when ``gpt2_decoder`` is given."""
    from etc_fairseq.visualize import gpt2_token_texts

    symbols = [dictionary[int(i)] for i in ids]
    return gpt2_token_texts(symbols, gpt2_decoder) if gpt2_decoder is not None else symbols


# ---------------------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="etc-show",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("data", type=Path, metavar="DATA", help="a prepared directory (see above)")
    p.add_argument("--kind", choices=("auto",) + KINDS, default="auto", help="data kind (default: detected)")
    p.add_argument("--split", default=None, help="split name (default: valid, else train, else the only one)")
    p.add_argument("--index", type=non_negative_int, default=0, help="example index in the split (default 0)")
    p.add_argument("--out", type=Path, required=True, metavar="PNG", help="output PNG (written atomically)")
    m = p.add_argument_group("model structure (from --arch unless given)")
    m.add_argument("--arch", default=None, help="ETC architecture giving r, k and the fixed block length (default: the one "
                   "etc-prepare --arch recorded in prepare.json, else etc_base)")
    m.add_argument("--radius", type=non_negative_int, default=None, metavar="R", help="l2l radius r")
    m.add_argument("--max-distance", type=non_negative_int, default=None, metavar="K", help="relative positions clipped at k")
    m.add_argument("--hard-g2l", action="store_true", help="hard g2l masking (global tokens see only their own long tokens)")
    m.add_argument("--hard-l2g", action="store_true", help="hard l2g masking")
    m.add_argument("--fixed-block-len", type=positive_int, default=None, metavar="N", help="masked_lm: long tokens per global token")
    d = p.add_argument_group("building the example")
    d.add_argument("--max-long-len", type=positive_int, default=512, help="pretrain: long input length (default 512, the task's)")
    d.add_argument("--max-global-len", type=positive_int, default=64, help="pretrain: global input length (default 64, the task's)")
    d.add_argument("--seed", type=int, default=1, help="pretrain: seed of the task's masking (which sentences are CPC)")
    d.add_argument("--tokens-per-sample", type=positive_int, default=512, help="masked_lm: block size incl. <s> (default 512)")
    d.add_argument("--sample-break-mode", default="none", choices=("none", "complete", "complete_doc", "eos"),
                   help="masked_lm: fairseq's block break mode (default none)")
    v = p.add_argument_group("picture")
    v.add_argument("--max-tokens", type=positive_int, default=None, metavar="N", help="show only the first N long tokens (said in the title)")
    v.add_argument("--max-global-tokens", type=positive_int, default=None, metavar="N", help="show only the first N global tokens")
    v.add_argument("--cell-size", type=positive_int, default=None, metavar="PX", help="cell size in pixels (default: fit 3000 px, at most 16; a picture "
                   "larger than 10000 px a side is refused)")
    v.add_argument("--gpt2-encoder-json", type=Path, default=None, metavar="FILE",
                   help="decode GPT-2 ids with this encoder.json (default: found next to the data, if any)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    return p


def _structure_settings(args) -> Tuple[int, int, int, str]:
    """(radius, max_distance, fixed_block_len, where they come from) from ``--arch``, else the data's recorded
    architecture, else ``etc_base``; explicit flags override."""
    import etc_fairseq.register  # noqa: F401  (registers the etc_* architectures)
    from etc_fairseq.models.architectures import config_for_arch

    from etc_fairseq.data.prepared import recorded_arch_settings

    recorded = None if args.arch else recorded_arch_settings(args.data)
    if recorded is not None:
        path, values = recorded
        r, k, b = values["local_radius"], values["relative_pos_max_distance"], values["fixed_block_len"]
        source = f"{values.get('arch', 'architecture')} (recorded in {path})"
    else:
        arch = args.arch or "etc_base"
        cfg = config_for_arch(arch)
        r, k, b = cfg.local_radius, cfg.relative_pos_max_distance, cfg.fixed_block_len
        source = f"--arch {arch}" if args.arch else "etc_base (default: the data records no architecture; pass --arch)"
        if not args.arch:
            logger.warning(f"{args.data}: no architecture recorded by etc-prepare --arch; drawing with etc_base's "
                           f"radius {r} (pass --arch or --radius)")
    r = r if args.radius is None else args.radius
    k = k if args.max_distance is None else args.max_distance
    b = b if args.fixed_block_len is None else args.fixed_block_len
    for name, val in (("--radius", r), ("--max-distance", k)):
        if val < 0:
            raise ConfigError(f"{name} must be >= 0, got {val}")
    if b < 1:
        raise ConfigError(f"--fixed-block-len must be >= 1, got {b}")
    return int(r), int(k), int(b), source


def run(args: argparse.Namespace) -> int:
    from etc_fairseq.data.indexed import load_dictionary

    from etc_fairseq.prepare.atomic import atomic_file
    from etc_fairseq.prepare.gpt2 import load_gpt2_decoder
    from etc_fairseq.structure.labels import RelativeLabelVocab
    from etc_fairseq.visualize import crop_grids, global_token_texts, label_grids, render_structure

    data = args.data
    kind = detect_kind(data) if args.kind == "auto" else args.kind
    split = choose_split(data, kind, args.split)
    radius, max_distance, block_len, source = _structure_settings(args)
    if kind == "pretrain":
        ex = load_pretrain_example(data, split, args.index, args.max_long_len, args.max_global_len, args.seed)
    elif kind == "structured":
        ex = load_structured_example(data, split, args.index)
    else:
        ex = load_masked_lm_example(data, split, args.index, args.tokens_per_sample, args.sample_break_mode, block_len)
    L, G = len(ex.long_tokens), len(ex.global_tokens)
    if L == 0:
        raise InputFormatError(f"{ex.description}: the example has no long tokens")

    vocab = RelativeLabelVocab(max_distance)
    grids = label_grids(L, G, ex.structure, vocab, radius, hard_g2l=args.hard_g2l, hard_l2g=args.hard_l2g)
    grids = crop_grids(grids, args.max_tokens, args.max_global_tokens)

    dictionary = load_dictionary(data / "dict.txt")
    dictionary.add_symbol("<mask>")  # as every task does
    from etc_fairseq.data.tokenizer_files import find_gpt2_encoder_json

    enc = args.gpt2_encoder_json or find_gpt2_encoder_json(data)
    if args.gpt2_encoder_json is not None and not args.gpt2_encoder_json.is_file():
        raise MissingFileError(f"{args.gpt2_encoder_json}: no such file (given as --gpt2-encoder-json)")
    decoder = load_gpt2_decoder(enc) if enc is not None else None
    long_text = token_texts(ex.long_tokens[: grids.long_shown], dictionary, decoder)
    global_text = global_token_texts(ex.global_types[: grids.global_shown],
                                     token_texts(ex.global_tokens[: grids.global_shown], dictionary, decoder))
    if ex.global_names is not None:  # a user-defined type shows its own name
        from etc_fairseq.structure.global_tokens import GlobalTokenType

        builtin = {t.name for t in GlobalTokenType}
        global_text = [n if n not in builtin else t for n, t in zip(ex.global_names, global_text)]

    overrides = [f"{flag} {val}" for flag, val in (("--radius", args.radius), ("--max-distance", args.max_distance))
                 if val is not None]
    settings = source + (f" with {', '.join(overrides)}" if overrides else "")
    title = ex.description + "\n" + settings + ("; hard g2l" if args.hard_g2l else "") + ("; hard l2g" if args.hard_l2g else "")
    suffix = args.out.suffix.lower()
    if suffix != ".png":
        raise ConfigError(f"--out {args.out}: must end in .png")
    with atomic_file(args.out, "wb") as f:
        layout = render_structure(grids, f, long_text, global_text, title=title, cell=args.cell_size)
    logger.info(
        "%s: %d x %d px, cell %d px; long %d of %d shown, global %d of %d shown",
        args.out, layout.width, layout.height, layout.cell, grids.long_shown, L, grids.global_shown, G,
    )
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from etc_fairseq.cli.common import report_user_errors, setup_logging
    from etc_fairseq.guards import check_command_outputs

    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.quiet)

    def body() -> int:
        check_command_outputs(args, file_outputs=("out",), dir_outputs=())
        return run(args)

    return report_user_errors("etc-show", args.debug, body)


if __name__ == "__main__":
    sys.exit(main())
