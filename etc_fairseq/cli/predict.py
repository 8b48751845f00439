"""``etc-predict TASK``: run a fine-tuned checkpoint over a prepared split and write the task's official
prediction file (HotpotQA ``{"answer": ..., "sp": ...}``, WikiHop ``{id: candidate}``, NQ's prediction
jsonl, OpenKP's keyphrase jsonl).

Each fine-tuning dataset's ``etc_fairseq/finetune/<name>/decode.py`` defines ``PREDICT`` (a
:class:`~etc_fairseq.commands.Subcommand`); see :mod:`etc_fairseq.commands`.
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

from etc_fairseq.cli.common import build_parser, run_cli
from etc_fairseq.commands import dataset_subcommands


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``etc-predict``; returns the exit status (1 on a user error, printed as one line)."""
    parser = build_parser(
        "etc-predict",
        "Write official-format predictions of a fine-tuned ETC checkpoint on a prepared split.",
        dataset_subcommands("etc-predict"),
    )
    return run_cli(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
