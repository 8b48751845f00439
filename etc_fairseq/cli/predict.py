"""``etc-predict TASK``: run a fine-tuned checkpoint over a prepared split and write the task's official
prediction file (HotpotQA ``{"answer": ..., "sp": ...}``, WikiHop ``{id: candidate}``, NQ's prediction
jsonl, OpenKP's keyphrase jsonl).

Each task module in :data:`TASK_MODULES` defines ``PREDICT`` (a :class:`~etc_fairseq.cli.common.Subcommand`).
"""
from __future__ import annotations

import sys
from typing import List, Optional, Sequence

from etc_fairseq.cli.common import build_parser, load_subcommands, run_cli

#: modules defining ``PREDICT``; one per fine-tuning task.
TASK_MODULES: List[str] = [
    "etc_fairseq.inference.hotpotqa",
    "etc_fairseq.inference.nq",
    "etc_fairseq.inference.openkp",
    "etc_fairseq.inference.wikihop",
]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``etc-predict``; returns the exit status (1 on a user error, printed as one line)."""
    parser = build_parser(
        "etc-predict",
        "Write official-format predictions of a fine-tuned ETC checkpoint on a prepared split.",
        load_subcommands(TASK_MODULES, "PREDICT"),
    )
    return run_cli(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
