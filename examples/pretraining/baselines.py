"""Baselines for the held-out MLM and CPC accuracies of examples/pretraining/README.md.

MLM: always predict the most frequent MLM target of the training split; scored on the validation
targets. Both use the task's own masks (same seed, epoch 1), i.e. exactly the targets that
fairseq-validate scores. CPC: chance = 1 / (CPC sentences per batch), at the README's batch size.

    python examples/pretraining/baselines.py runs/etc_pretraining/data/bin [--batch-size 8] [--seed 1]
"""
import argparse
from collections import Counter

import numpy as np

from etc_fairseq.pretraining.task import EtcPretrainingConfig, EtcPretrainingTask


def split_items(task, split):
    task.load_dataset(split)
    ds = task.dataset(split)
    return [ds[i] for i in range(len(ds))]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-long-len", type=int, default=512)
    p.add_argument("--max-global-len", type=int, default=64)
    a = p.parse_args()
    task = EtcPretrainingTask.setup_task(
        EtcPretrainingConfig(data=a.data, max_long_len=a.max_long_len, max_global_len=a.max_global_len, seed=a.seed)
    )
    pad = task.dictionary.pad()

    def targets(items):
        return np.concatenate([it["target"].numpy()[it["target"].numpy() != pad] for it in items])

    train_t = targets(split_items(task, "train"))
    valid_items = split_items(task, "valid")
    valid_t = targets(valid_items)
    top, _ = Counter(train_t.tolist()).most_common(1)[0]
    n_cpc = sum(len(it["cpc_global_index"]) for it in valid_items)
    n_batches = -(-len(valid_items) // a.batch_size)
    per_batch = n_cpc / n_batches
    print(f"valid examples {len(valid_items)}, MLM targets {len(valid_t)}, CPC sentences {n_cpc}")
    print(f"MLM baseline: always {task.dictionary[top]!r} -> {100 * np.mean(valid_t == top):.1f}% of valid targets")
    print(f"CPC chance: 1 / {per_batch:.2f} candidates per batch -> {100 / per_batch:.1f}%")


if __name__ == "__main__":
    main()
