"""Write a whole output directory or file atomically: build it under a temporary name next to the target,
then rename, so that an interrupted or failed run never leaves a half-written output behind.

A write that fails for a reason of the output location (disk full, read-only, no permission, a path under a
regular file) is re-raised as an :class:`~etc_fairseq.errors.OutputWriteError` (an ``OSError`` with the same
``errno``) naming the output path (not the temporary one), after the temporary copy is removed; an existing
output is then unchanged.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional, Union

from etc_fairseq.errors import OutputExistsError, OutputWriteError

PathLike = Union[str, "os.PathLike[str]"]

#: errors of the output location rather than of the data
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT, errno.EPERM, errno.EIO, errno.EFBIG,
                  errno.ENOTDIR, errno.EEXIST}


def _output_error(e: OSError, dest: Path, tmp: Optional[PathLike]) -> Optional[OutputWriteError]:
    """``e`` restated for ``dest`` when it is a failure to write there (None: leave ``e`` as it is)."""
    if e.errno not in _OUTPUT_ERRNOS:
        return None
    name = None if e.filename is None else str(e.filename)
    ours = [str(dest), str(dest.parent)] + ([str(tmp)] if tmp is not None else [])
    if name is not None and not any(name == p or name.startswith(p + os.sep) for p in ours):
        return None
    return OutputWriteError(e.errno, f"cannot write the output ({e.strerror or e}); nothing was written", str(dest))


def _umask_mode(mode: int) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


@contextlib.contextmanager
def atomic_directory(dest: PathLike, overwrite: bool = False, marker: Optional[str] = None) -> Iterator[Path]:
    """Yield a fresh temporary directory; on normal exit it replaces ``dest``, on an exception it is removed.

    Args:
        dest: the final directory.
        overwrite: replace an existing ``dest`` (else OutputExistsError before anything is written).
        marker: the file a finished run of the command leaves in ``dest`` (``prepare.json``): with it, an
            existing ``dest`` is replaced only when it holds ``marker`` or is empty
            (:func:`etc_fairseq.guards.check_replaceable_directory`): ``--overwrite`` deletes only what
            the command made.
    Raises:
        OutputExistsError: ``dest`` exists and not ``overwrite`` (names the path).
        OutputRefusedError: ``dest`` is not the command's own output.
        OutputWriteError: ``dest`` cannot be written (named); nothing is left behind and an old ``dest`` is kept.
    """
    from etc_fairseq.guards import check_replaceable_directory

    dest = Path(dest)
    if dest.exists() and not overwrite:
        raise OutputExistsError(f"{dest}: already exists (pass --overwrite to replace it)")
    if marker is not None:
        check_replaceable_directory(dest, marker)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    except OSError as e:
        raise (_output_error(e, dest, None) or e) from None
    os.chmod(tmp, _umask_mode(0o777))  # mkdtemp makes it 0700
    try:
        try:
            yield tmp
            if dest.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
                os.replace(dest, old / dest.name)
                try:
                    os.replace(tmp, dest)
                except OSError:
                    os.replace(old / dest.name, dest)  # put the previous output back
                    raise
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, dest)
        except OSError as e:
            raise (_output_error(e, dest, tmp) or e) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(dest: PathLike, mode: str = "w", encoding: str = "utf-8") -> Iterator:
    """Open a temporary file next to ``dest`` for writing; rename it to ``dest`` on normal exit.

    Raises:
        OutputWriteError: ``dest`` is a directory, or cannot be written (named); no temporary file is left
            and an old ``dest`` is kept.
    """
    dest = Path(dest)
    if dest.is_dir():
        raise OutputWriteError(errno.EISDIR, "is a directory; give the file to write", str(dest))
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.tmp-", dir=dest.parent)
    except OSError as e:
        raise (_output_error(e, dest, None) or e) from None
    os.close(fd)
    os.chmod(tmp, _umask_mode(0o666))
    try:
        try:
            with open(tmp, mode, **({} if "b" in mode else {"encoding": encoding})) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        except OSError as e:
            raise (_output_error(e, dest, tmp) or e) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
