"""Binarize text splits with fairseq's own preprocessing (``fairseq_cli.preprocess``), atomically.

fairseq-preprocess is run with ``--only-source`` and writes ``dict.txt``, ``{train,valid,test}.{bin,idx}``
and ``preprocess.log``. The output first goes to a temporary directory next to the target, which is renamed
into place only when preprocessing finished (:func:`etc_fairseq.prepare.atomic.atomic_directory`): an
interrupted run never leaves a half-written ``bin/`` that a later "skip if present" check would trust.
"""
from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from etc_fairseq.errors import ExternalToolError, MissingFileError

from .atomic import atomic_directory
from .documents import PathLike

logger = logging.getLogger(__name__)


class BinarizeError(ExternalToolError):
    """fairseq preprocessing failed, or the destination is in the way."""


def preprocess_argv(
    destdir: PathLike,
    trainpref: Optional[PathLike] = None,
    validpref: Optional[PathLike] = None,
    testpref: Optional[PathLike] = None,
    srcdict: Optional[PathLike] = None,
    workers: int = 1,
    extra_args: Sequence[str] = (),
) -> List[str]:
    """The fairseq-preprocess command-line arguments for a source-only dataset.

    Args:
        destdir: output directory.
        trainpref / validpref / testpref: input text files (fairseq calls them prefixes; with
            ``--only-source`` and no language they are the file names themselves).
        srcdict: an existing ``dict.txt`` to use; ``None`` builds it from the train file.
        workers: fairseq's ``--workers``.
        extra_args: further fairseq-preprocess arguments (e.g. ``["--padding-factor", "1"]``).
    Returns:
        the argument list (without the program name).
    """
    argv = ["--only-source", "--destdir", str(destdir), "--workers", str(workers), "--dataset-impl", "mmap"]
    for flag, value in (("--trainpref", trainpref), ("--validpref", validpref), ("--testpref", testpref)):
        if value is not None:
            argv += [flag, str(value)]
    if srcdict is not None:
        argv += ["--srcdict", str(srcdict)]
    return argv + list(extra_args)


def _run_in_process(argv: List[str]) -> None:
    """Call fairseq_cli.preprocess.main in this process (saves the ~3 s fairseq import of a subprocess)."""
    from fairseq import options
    from fairseq_cli import preprocess

    args = options.get_preprocessing_parser().parse_args(argv)
    plog = logging.getLogger("fairseq_cli.preprocess")
    before = list(plog.handlers)
    try:
        preprocess.main(args)
    finally:
        # main() adds a FileHandler on destdir/preprocess.log at every call; drop it so that handlers do
        # not pile up across calls or keep writing into a directory that has since been renamed.
        for h in list(plog.handlers):
            if h not in before:
                plog.removeHandler(h)
                h.close()


def _run_subprocess(argv: List[str]) -> None:
    """Run ``python -m fairseq_cli.preprocess`` (isolated; its output goes to the log)."""
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess"] + argv
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise BinarizeError(f"fairseq preprocessing failed (exit code {proc.returncode}): {' '.join(cmd)}\n{tail}")


def binarize(
    destdir: PathLike,
    trainpref: Optional[PathLike] = None,
    validpref: Optional[PathLike] = None,
    testpref: Optional[PathLike] = None,
    srcdict: Optional[PathLike] = None,
    workers: int = 1,
    extra_args: Sequence[str] = (),
    overwrite: bool = False,
    in_process: bool = True,
) -> Path:
    """Binarize text files into ``destdir`` with fairseq-preprocess (``--only-source``), atomically.

    Args:
        destdir: final output directory; it must not exist unless ``overwrite``.
        trainpref / validpref / testpref: text files, one sequence per line (space-separated tokens).
        srcdict: a ``dict.txt`` to reuse (required when there is no ``trainpref``).
        workers: parallel binarization workers.
        extra_args: further fairseq-preprocess arguments.
        overwrite: replace an existing ``destdir``.
        in_process: call fairseq in this process (fast) rather than in a ``python -m`` subprocess.
    Returns:
        ``destdir``, containing ``dict.txt`` and ``<split>.bin/.idx`` for each given split.
    Raises:
        FileNotFoundError: an input file or ``srcdict`` does not exist (message names it).
        BinarizeError: ``destdir`` exists and not ``overwrite``, or fairseq failed.
        OutputWriteError: ``destdir`` cannot be written (named); nothing is left behind.
    """
    destdir = Path(destdir)
    for name, value in (("train", trainpref), ("valid", validpref), ("test", testpref), ("dictionary", srcdict)):
        if value is not None and not Path(value).is_file():
            raise MissingFileError(f"{value}: no such {name} file for fairseq preprocessing")
    if trainpref is None and srcdict is None:
        raise BinarizeError("binarize needs a train file to build the dictionary from, or an existing srcdict")
    if srcdict is not None:
        from etc_fairseq.data.indexed import check_dictionary_file

        check_dictionary_file(srcdict)  # fairseq-preprocess would take an empty one and map everything to <unk>
    if destdir.exists() and not overwrite:
        raise BinarizeError(f"{destdir}: already exists (pass overwrite=True / --overwrite to replace it)")
    t0 = time.monotonic()
    with atomic_directory(destdir, overwrite=True) as tmp:
        argv = preprocess_argv(tmp, trainpref, validpref, testpref, srcdict, workers, extra_args)
        logger.info("fairseq-preprocess %s", " ".join(argv))
        if in_process:
            try:
                _run_in_process(argv)
            except SystemExit as e:  # argparse errors inside fairseq
                raise BinarizeError(f"fairseq preprocessing rejected its arguments {argv} (exit {e.code})") from None
            except (AssertionError, FileExistsError, ValueError) as e:
                raise BinarizeError(f"fairseq preprocessing failed: {e!r}") from None
        else:
            _run_subprocess(argv)
    logger.info("binarized into %s in %.1f s", destdir, time.monotonic() - t0)
    return destdir
