"""Fix for ``fairseq.file_io.PathManager.copy`` (fairseq 0.12), with which ``checkpoint_utils.save_checkpoint``
writes ``checkpoint_last.pt`` / ``checkpoint_best.pt`` as copies of the checkpoint it just saved.

fairseq's copy is a plain ``shutil.copyfile`` onto the destination, so a kill during the copy leaves a
truncated ``checkpoint_last.pt`` that the next run resumes from. The replacement copies a local file to a
temporary name in the destination directory (``.checkpoint_last.pt.tmp-*``, given the source's mode, i.e.
0666 minus the umask like every other checkpoint), fsyncs, and renames (atomic on POSIX). Temporaries a
killed copy left behind are removed by the next copy and when training starts
(:mod:`etc_fairseq.fairseq_fixes.training_start`).
"""
import contextlib
import functools
import logging
import os
import shutil
import stat
import tempfile
from glob import escape as glob_escape
from pathlib import Path
from typing import List

from .patching import Patch

logger = logging.getLogger(__name__)


def stale_temporaries(directory) -> List[Path]:
    """Files a killed checkpoint save leaves in ``directory``: ``.checkpoint*.pt.tmp-*`` (our copy of
    ``checkpoint_last.pt`` / ``checkpoint_best.pt``) and ``checkpoint*.pt.tmp`` (fairseq's own atomic save)."""
    d = Path(directory)
    try:
        return sorted(set(d.glob(".checkpoint*.pt.tmp-*")) | set(d.glob("checkpoint*.pt.tmp")))
    except OSError:
        return []


def remove_stale_temporaries(directory) -> None:
    """Delete :func:`stale_temporaries` (logged); called when a save or a training run starts, when
    nothing is writing them."""
    for p in stale_temporaries(directory):
        try:
            p.unlink()
            logger.info(f"removed {p}, left by an interrupted checkpoint save")
        except FileNotFoundError:  # another rank removed it first
            pass


def _wrap(original):
    @functools.wraps(original)
    def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
        from fairseq.file_io import PathManager

        if PathManager.path_requires_pathmanager(src_path) or PathManager.path_requires_pathmanager(dst_path):
            return original(src_path, dst_path, overwrite=overwrite)
        if os.path.exists(dst_path) and not overwrite:
            return original(src_path, dst_path, overwrite=overwrite)
        dst_dir = os.path.dirname(os.path.abspath(dst_path))
        prefix = f".{os.path.basename(dst_path)}.tmp-"
        for stale in Path(dst_dir).glob(glob_escape(prefix) + "*"):  # a copy killed before its rename
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        fd, tmp = tempfile.mkstemp(prefix=prefix, dir=dst_dir)
        try:
            # mkstemp creates 0600; give the copy the mode of its source, which fairseq created like
            # every other checkpoint (0666 minus the umask)
            os.chmod(tmp, stat.S_IMODE(os.stat(src_path).st_mode))
            with os.fdopen(fd, "wb") as out, open(src_path, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, dst_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return True

    return staticmethod(copy)


PATCHES = (Patch("fairseq.file_io", "PathManager.copy", _wrap),)
