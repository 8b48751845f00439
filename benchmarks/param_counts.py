"""Parameter counts of the ETC architectures, against the paper's (appendix E, tables 1-3).

Models are built on the meta device (shapes only), so etc_large costs no memory. Prints a markdown
table and writes JSON (default benchmarks/results/param_counts.json).

    python -m benchmarks.param_counts
"""
import argparse
import os
import types

import torch
from fairseq.data import Dictionary

from benchmarks.harness import RESULTS_DIR, write_json
from etc_fairseq.models import EtcModel, config_for_arch

ROWS = [  # (arch, vocabulary size, paper's count or None)
    ("etc_base", 30522, 166e6),
    ("etc_base_shared", 30522, 109e6),
    ("etc_large", 50265, 558e6),
    ("etc_large", 30522, 539e6),
    ("etc_large_shared", 50265, None),
    ("etc_tiny", 8000, None),
]


def count(arch: str, vocab: int) -> int:
    d = Dictionary()
    for i in range(vocab - len(d)):
        d.add_symbol(f"w{i}")
    with torch.device("meta"):
        model = EtcModel.build_model(config_for_arch(arch), types.SimpleNamespace(source_dictionary=d))
    # the LM head's weight is the token embedding (tied): count each tensor once
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "param_counts.json"))
    a = p.parse_args()
    results = []
    print("| arch | vocabulary | parameters | paper |\n|---|---:|---:|---:|")
    for arch, vocab, paper in ROWS:
        n = count(arch, vocab)
        results.append({"arch": arch, "vocab": vocab, "params": n, "paper": paper})
        print(f"| {arch} | {vocab:,} | {n / 1e6:.1f}M | {f'{paper / 1e6:.0f}M' if paper else '-'} |")
    write_json(a.out, results)


if __name__ == "__main__":
    main()
