"""What the ``etc-*`` commands with subcommands share: the parser built from a list of
:class:`~etc_fairseq.commands.Subcommand` records, logging setup, and the runner that turns user errors into
one line on stderr.

The records, and where each command finds its datasets' subcommands, live in :mod:`etc_fairseq.commands`.
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable, Optional, Sequence

from etc_fairseq.commands import Subcommand


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose argument errors are one line (``PROG: error: ... (see PROG --help)``,
    exit status 2) instead of the usage block followed by the error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser(prog: str, description: str, subcommands: Sequence[Subcommand]) -> argparse.ArgumentParser:
    """A parser with ``-v/-q/--debug/--no-progress-bar`` and one sub-parser per subcommand (chosen one in ``args._subcommand``)."""
    parser = OneLineArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    no_bar_help = ("no progress bars (they are drawn only when stderr is a terminal; the environment variable "
                   "ETC_NO_PROGRESS_BAR=1 turns them off too)")
    parser.add_argument("--no-progress-bar", action="store_true", help=no_bar_help)
    sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    for sc in subcommands:
        p = sub.add_parser(
            sc.name, help=sc.help, description=sc.description, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        sc.add_arguments(p)
        # also after the subcommand (SUPPRESS: not given there, the value before it stays)
        p.add_argument("--no-progress-bar", action="store_true", default=argparse.SUPPRESS, help=no_bar_help)
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


def report_user_errors(prog: str, debug: bool, body: Callable[[], int]) -> int:
    """Run ``body()``; a user error (:func:`etc_fairseq.errors.is_user_error`: an
    :class:`~etc_fairseq.errors.EtcError`, or a full disk / read-only / unwritable file named by an
    ``OSError``) becomes one line ``PROG: error: ...`` on stderr and exit status 1 (``debug``: the traceback
    instead). Anything else is a bug and keeps its traceback. The one handler of every ``etc-*`` command."""
    from etc_fairseq.guards import one_line_error

    try:
        return body()
    except Exception as e:  # noqa: BLE001 -- re-raised unless it is a user error
        from etc_fairseq.errors import is_user_error

        if debug or not is_user_error(e):
            raise
        print(f"{prog}: error: {one_line_error(e)}", file=sys.stderr)
        return 1


def run_cli(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` and run the chosen subcommand, after checking that no output option (``--out``,
    ``--output``, ``--report``) names, holds or sits on an input (:func:`etc_fairseq.guards.check_command_outputs`).

    Returns:
        0 on success, 1 on a data/user error (one line on stderr naming the command), 2 on bad arguments
        (one line from argparse).
    """
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    from etc_fairseq.progress import set_enabled

    set_enabled(not args.no_progress_bar)
    from etc_fairseq.guards import check_command_outputs

    def body() -> int:
        check_command_outputs(args)
        return args._subcommand.run(args)

    return report_user_errors(f"{parser.prog} {args.subcommand}", args.debug, body)
