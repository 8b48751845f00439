"""``etc-evaluate TASK``: score an official-format prediction file against the official gold file with the
official evaluation definitions (reimplemented; see each module in :data:`TASK_MODULES`).

Each module defines ``EVALUATE`` (a :class:`~etc_fairseq.cli.common.Subcommand`).
"""
from __future__ import annotations

import sys
from typing import List, Optional, Sequence

from etc_fairseq.cli.common import build_parser, load_subcommands, run_cli

#: modules defining ``EVALUATE``; one per task with an official metric.
TASK_MODULES: List[str] = [
    "etc_fairseq.evaluation.hotpotqa",
    "etc_fairseq.evaluation.nq",
    "etc_fairseq.evaluation.openkp",
    "etc_fairseq.evaluation.wikihop",
]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``etc-evaluate``; returns the exit status (1 on a user error, printed as one line)."""
    parser = build_parser(
        "etc-evaluate",
        "Score official-format predictions against official gold files.",
        load_subcommands(TASK_MODULES, "EVALUATE"),
    )
    return run_cli(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
