"""``etc-evaluate TASK``: score an official-format prediction file against the official gold file with the
official evaluation definitions (reimplemented; see each dataset's ``metrics.py``).

Each fine-tuning dataset's ``etc_fairseq/finetune/<name>/metrics.py`` defines ``EVALUATE`` (a
:class:`~etc_fairseq.commands.Subcommand`); see :mod:`etc_fairseq.commands`.
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

from etc_fairseq.cli.common import build_parser, run_cli
from etc_fairseq.commands import dataset_subcommands


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``etc-evaluate``; returns the exit status (1 on a user error, printed as one line)."""
    parser = build_parser(
        "etc-evaluate",
        "Score official-format predictions against official gold files.",
        dataset_subcommands("etc-evaluate"),
    )
    return run_cli(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
