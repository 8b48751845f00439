"""What one training step of the lifted model costs: seconds of forward + backward of a lifted ETC
checkpoint's encoder on one CONSTRUCTED example (random token ids, one global token per 28 long tokens, the
checkpoint's hard g2l), at each ``LONG,LAYERS,SHARED`` given, on the threads torch is allowed (set
OMP_NUM_THREADS=1 for one core). The best of ``--repeats``; the planning input of README.md's budget (on a
shared machine: a figure for choosing sizes, not a benchmark).

    OMP_NUM_THREADS=1 python examples/lifted_minilm/cost.py --model runs/lifted_minilm/lifted 1200,6,0 1200,3,0
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Optional, Sequence


def step_seconds(model_dir: Path, long_len: int, layers: int, shared: bool, repeats: int = 2) -> float:
    """Best wall time (s) of forward + backward over one example of ``long_len`` long tokens with the lifted
    config of ``model_dir/model.pt`` cut or grown to ``layers`` layers (fresh weights: the cost does not depend
    on their values); ``shared``: one Q, K, V and output projection for every attention piece."""
    import torch

    from etc_fairseq.checkpoint_io import load_checkpoint
    from etc_fairseq.lift import masked_lm_dictionary
    from etc_fairseq.models.lifting import build_etc_model
    from etc_fairseq.models import config_for_arch

    fields = {k: v for k, v in load_checkpoint(model_dir / "model.pt")["cfg"]["model"].items() if not k.startswith("_")}
    fields["encoder_layers"] = layers
    if shared:
        fields.update(shared_q=True, shared_kv=True, shared_out_proj=True)
    dictionary = masked_lm_dictionary(model_dir / "dict.txt")
    model = build_etc_model(config_for_arch("etc_base", **fields), dictionary, seed=1)
    model.train()
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(10, len(dictionary) - 1, (1, long_len), generator=g)  # [1, L]
    glob = torch.zeros(1, long_len // 28, dtype=torch.long)  # [1, G]
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        features, extra = model(tokens, features_only=True, global_tokens=glob, global_types=glob)
        features.pow(2).mean().backward()
        best = min(best, time.perf_counter() - t)
        model.zero_grad()
    return best


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, required=True, help="an etc-lift output directory (model.pt, dict.txt)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("specs", nargs="+", metavar="LONG,LAYERS,SHARED")
    a = p.parse_args(argv)
    for spec in a.specs:
        long_len, layers, shared = (int(x) for x in spec.split(","))
        s = step_seconds(a.model, long_len, layers, bool(shared), a.repeats)
        print(f"long {long_len}, {layers} layers, {'shared' if shared else 'separate'} projections: "
              f"{s:.2f} s forward + backward ({1000 * s / long_len:.2f} ms per long token)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
