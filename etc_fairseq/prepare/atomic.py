"""Write a whole output directory or file atomically: build it under a temporary name next to the target,
then rename, so that an interrupted or failed run never leaves a half-written output behind."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Union

PathLike = Union[str, "os.PathLike[str]"]


def _umask_mode(mode: int) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


@contextlib.contextmanager
def atomic_directory(dest: PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory; on normal exit it replaces ``dest``, on an exception it is removed.

    Args:
        dest: the final directory.
        overwrite: replace an existing ``dest`` (else FileExistsError before anything is written).
    Raises:
        FileExistsError: ``dest`` exists and not ``overwrite`` (names the path).
    """
    dest = Path(dest)
    if dest.exists() and not overwrite:
        raise FileExistsError(f"{dest}: already exists (pass --overwrite to replace it)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    os.chmod(tmp, _umask_mode(0o777))  # mkdtemp makes it 0700
    try:
        yield tmp
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
            os.replace(dest, old / dest.name)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(dest: PathLike, mode: str = "w", encoding: str = "utf-8") -> Iterator:
    """Open a temporary file next to ``dest`` for writing; rename it to ``dest`` on normal exit."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.tmp-", dir=dest.parent)
    os.close(fd)
    os.chmod(tmp, _umask_mode(0o666))
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": encoding})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
