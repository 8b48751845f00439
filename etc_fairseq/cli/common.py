"""What the ``etc-*`` commands with subcommands share: the :class:`Subcommand` record, the parser built
from a list of them, and the runner that turns user errors into one line on stderr.

Dataset-specific subcommands live next to their dataset's code (e.g. ``etc_fairseq/prepare/hotpotqa.py``
defines ``PREPARE``; ``etc_fairseq/evaluation/hotpotqa.py`` defines ``EVALUATE``) and are imported lazily
by module name, so ``etc-prepare --help`` does not import torch or fairseq unless a module does at top level.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence


@dataclass
class Subcommand:
    """One subcommand of an ``etc-*`` command.

    Attributes:
        name: the word on the command line.
        help: one line for ``COMMAND --help``.
        description: the text at the top of ``COMMAND NAME --help``.
        add_arguments: adds the subcommand's options to its parser.
        run: does the work; returns the exit status.
    """

    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def load_subcommands(modules: Sequence[str], attribute: str) -> List[Subcommand]:
    """Import ``module.ATTRIBUTE`` (a :class:`Subcommand`) from each module name, in order."""
    out = []
    for name in modules:
        sc = getattr(importlib.import_module(name), attribute)
        if not isinstance(sc, Subcommand):
            raise TypeError(f"{name}.{attribute} must be a Subcommand, got {type(sc).__name__}")
        out.append(sc)
    return out


def build_parser(prog: str, description: str, subcommands: Sequence[Subcommand]) -> argparse.ArgumentParser:
    """A parser with ``-v/-q/--debug`` and one sub-parser per subcommand (chosen one in ``args._subcommand``)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    for sc in subcommands:
        p = sub.add_parser(
            sc.name, help=sc.help, description=sc.description, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        sc.add_arguments(p)
        p.set_defaults(_subcommand=sc)
    return parser


def setup_logging(verbose: bool, quiet: bool) -> None:
    """INFO logging to stderr in fairseq's style (DEBUG with ``-v``, WARNING with ``-q``)."""
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(
        level=level,
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger().setLevel(level)
    # fairseq's preprocess logs every argument at INFO; ours already says what runs.
    for name in ("fairseq_cli.preprocess", "fairseq.tasks.text_to_speech", "fairseq.data.data_utils"):
        logging.getLogger(name).setLevel(logging.WARNING if not verbose else logging.DEBUG)


def run_cli(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` and run the chosen subcommand.

    Returns:
        0 on success, 1 on a data/user error (one line on stderr naming the command), 2 on bad arguments
        (argparse exits).
    """
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    from etc_fairseq.prepare.errors import USER_ERRORS

    try:
        return args._subcommand.run(args)
    except USER_ERRORS as e:
        if args.debug:
            raise
        print(f"{parser.prog} {args.subcommand}: error: {e}", file=sys.stderr)
        return 1
