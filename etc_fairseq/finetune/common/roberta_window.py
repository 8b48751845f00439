"""A pre-trained fairseq RoBERTa checkpoint or Hugging Face BERT directory -> a ``roberta_window`` checkpoint
(:mod:`.roberta`), for ``fairseq-train --finetune-from-model``.

``fairseq-train --arch roberta_*`` saves its config as an argparse Namespace, which etc-fairseq's checkpoint
gate refuses to build a model from (:func:`etc_fairseq.models.checkpoint_config.validate_checkpoint_config`). This
reads the file with the same safe loader as ``etc-lift`` (tensors and a few typed size fields, no model built
from its config) and writes the RoBERTa encoder's tensors unchanged (``encoder.sentence_encoder.*``) under a
``roberta_window`` dataclass config with the checkpoint's sizes; the LM head and classification heads are
left out (a fine-tuning model has neither). The window is the checkpoint's ``max_positions`` (the learned
position table holds ``max_positions + 2`` rows: fairseq offsets positions by the padding index + 1).

Usage::

    python -m etc_fairseq.finetune.common.roberta_window ROBERTA/checkpoint_last.pt --out roberta_window.pt
    fairseq-train DATA --task etc_nextsent --arch roberta_window --encoder-layers 2 --encoder-embed-dim 64 \\
        --encoder-ffn-embed-dim 256 --encoder-attention-heads 4 --max-positions 512 \\
        --finetune-from-model roberta_window.pt ...
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from etc_fairseq.lift.fairseq_roberta import LiftError, load_roberta_state
from etc_fairseq.models.lifting import save_model_checkpoint

from .roberta import ROBERTA_WINDOW

#: the RoBERTa encoder's tensors, kept as they are
ENCODER_PREFIX = "encoder.sentence_encoder."


def roberta_window_config(roberta_cfg, positions_rows: Optional[int]) -> Dict[str, Any]:
    """The ``roberta_window`` model config (plain dict with ``_name``) for a RoBERTa of ``roberta_cfg``'s
    sizes (:class:`~etc_fairseq.lift.fairseq_roberta.RobertaConfig`); ``positions_rows``: rows of its
    learned position table (None: no table)."""
    window = roberta_cfg.max_positions
    if positions_rows is not None:
        if window is not None and window + 2 != positions_rows:
            raise LiftError(f"the checkpoint says max_positions={window} but its position table has "
                            f"{positions_rows} rows (expected max_positions + 2)")
        window = positions_rows - 2
    if window is None or window < 1:
        raise LiftError("the checkpoint records no max_positions and has no position table: window unknown")
    return {
        "_name": ROBERTA_WINDOW,
        "encoder_layers": roberta_cfg.encoder_layers,
        "encoder_embed_dim": roberta_cfg.encoder_embed_dim,
        "encoder_ffn_embed_dim": roberta_cfg.encoder_ffn_embed_dim,
        "encoder_attention_heads": roberta_cfg.encoder_attention_heads,
        "activation_fn": roberta_cfg.activation_fn,
        "encoder_normalize_before": roberta_cfg.encoder_normalize_before,
        "max_positions": int(window),
    }


def convert(roberta_path: Path, out: Path) -> Tuple[Path, Dict[str, Any]]:
    """File to file (see the module docstring). Returns (path written, the model config)."""
    state, roberta_cfg = load_roberta_state(roberta_path)
    kept = {k: v for k, v in state.items() if k.startswith(ENCODER_PREFIX)}
    if not kept:
        raise LiftError(f"{roberta_path}: no {ENCODER_PREFIX}* tensors: not a fairseq RoBERTa checkpoint")
    table = kept.get(ENCODER_PREFIX + "embed_positions.weight")
    try:
        cfg = roberta_window_config(roberta_cfg, table.shape[0] if table is not None else None)
    except LiftError as e:
        raise LiftError(f"{roberta_path}: {e}") from None
    path = save_model_checkpoint(out, kept, cfg, {"source": str(roberta_path), "kind": "fairseq RoBERTa"},
                                 what="roberta_window checkpoint")
    return path, cfg


def convert_huggingface(directory: Path, out: Path) -> Tuple[Path, Dict[str, Any]]:
    """A Hugging Face BERT directory -> a ``roberta_window`` checkpoint computing the same function (the
    source model itself, absolute positions and all, reading the first ``max_position_embeddings`` tokens).

    The tensors are :func:`etc_fairseq.lift.huggingface.read_huggingface`'s (fairseq RoBERTa names, token rows
    in the order of the ``dict.txt`` etc-lift writes for the same directory). BERT adds position ``i``'s row
    and token type 0's row to every token; fairseq's learned positions give token ``i`` row ``i + pad + 1``
    (pad = 1) and have no token types, so the table written is ``[0, 0, positions + token_type[0]]``, float
    [max_position_embeddings + 2, D]. fairseq's LayerNorm epsilon (1e-5) replaces BERT's (1e-12 for most
    models): a difference far below the features' scale. Returns (path written, the model config).

    Raises:
        LiftError: not a BERT directory (RoBERTa directories: lift them with etc-lift), or unreadable.
    """
    import torch

    from etc_fairseq.lift.fairseq_roberta import RobertaConfig
    from etc_fairseq.lift.huggingface import read_huggingface

    src = read_huggingface(directory)
    if src.kind != "bert":
        raise LiftError(f"{directory}: a Hugging Face {src.kind} directory; this conversion reads BERT's "
                        "index-based positions and token types (a fairseq RoBERTa checkpoint converts as it is)")
    positions = src.extra["positions"]
    if "token_type" in src.extra:
        positions = positions + src.extra["token_type"][0]
    table = torch.cat([positions.new_zeros(2, positions.shape[1]), positions])  # rows 0 and pad (1) unused
    kept = {k: v.contiguous() for k, v in src.state.items() if k.startswith(ENCODER_PREFIX)}
    kept[ENCODER_PREFIX + "embed_positions.weight"] = table
    c = src.roberta_cfg
    cfg = roberta_window_config(RobertaConfig(c.encoder_layers, c.encoder_embed_dim, c.encoder_attention_heads,
                                              c.encoder_ffn_embed_dim, c.activation_fn, positions.shape[0]),
                                table.shape[0])
    path = save_model_checkpoint(out, kept, cfg, {"source": str(directory), "kind": "Hugging Face bert"},
                                 what="roberta_window checkpoint")
    return path, cfg


def model_flags(cfg: Dict[str, Any]) -> str:
    """The fairseq-train model flags that build the model of a converted checkpoint's config."""
    flags = [f"--arch {ROBERTA_WINDOW}"]
    flags += [f"--{k.replace('_', '-')} {v}" for k, v in cfg.items() if k not in ("_name", "encoder_normalize_before")]
    if cfg.get("encoder_normalize_before"):
        flags.append("--encoder-normalize-before")
    return " ".join(flags)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m etc_fairseq.finetune.common.roberta_window",
        description="Turn a fairseq RoBERTa checkpoint into a roberta_window checkpoint (same tensors, "
        "dataclass config) for fairseq-train --arch roberta_window --finetune-from-model; or (--flags) print "
        "the fairseq-train model flags of a converted checkpoint.")
    p.add_argument("source", type=Path, nargs="?", help="a fairseq RoBERTa checkpoint (fairseq-train --arch roberta_*), "
                   "or a Hugging Face BERT directory (its token rows follow the dict.txt etc-lift writes for it)")
    p.add_argument("--out", type=Path, help="the roberta_window checkpoint to write")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--flags", type=Path, metavar="CKPT", help="print the model flags of a converted checkpoint")
    a = p.parse_args(argv)
    from etc_fairseq.errors import CheckpointLoadError

    if a.flags is not None:
        if a.source is not None or a.out is not None:
            p.error("--flags takes no source and no --out")
        from etc_fairseq.checkpoint_io import load_checkpoint

        try:
            cfg = load_checkpoint(a.flags)["cfg"]["model"]
        except (CheckpointLoadError, KeyError, TypeError) as e:
            print(f"error: {a.flags}: not a roberta_window checkpoint ({e})", file=sys.stderr)
            return 1
        if not isinstance(cfg, dict) or cfg.get("_name") != ROBERTA_WINDOW:
            print(f"error: {a.flags}: not a roberta_window checkpoint (cfg.model._name is not "
                  f"{ROBERTA_WINDOW!r})", file=sys.stderr)
            return 1
        print(model_flags(cfg))
        return 0
    if a.source is None or a.out is None:
        p.error("give SOURCE and --out (or --flags CKPT)")
    if a.out.exists() and not a.overwrite:
        print(f"error: {a.out} exists (pass --overwrite to replace it)", file=sys.stderr)
        return 1
    if a.out.resolve() == a.source.resolve():
        print(f"error: --out {a.out} is the source checkpoint", file=sys.stderr)
        return 1
    from etc_fairseq.lift.huggingface import is_huggingface_dir

    try:
        if is_huggingface_dir(a.source):
            path, cfg = convert_huggingface(a.source, a.out)
        else:
            path, cfg = convert(a.source, a.out)
    except (LiftError, CheckpointLoadError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {path}; fine-tune with: fairseq-train DATA --task etc_nextsent {model_flags(cfg)} "
          f"--finetune-from-model {path} ...")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
