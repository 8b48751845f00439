"""Progress bars of the long ``etc-*`` jobs (conversions, corpus building, prediction, evaluation): one
helper, :func:`progress`, a ``tqdm`` bar on stderr.

A bar is shown only where someone watches: stderr is a terminal, the environment variable
:data:`ENV_VAR` is unset (or ``0``), and the command was not given ``--no-progress-bar``
(:func:`set_enabled`). Otherwise the iterable passes through unchanged and the jobs' own log lines remain the
record of their progress (logs, CI, pipes stay clean).
"""
from __future__ import annotations

import os
import sys
from typing import Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")

#: set to anything but ``0`` or the empty string to turn every bar off
ENV_VAR = "ETC_NO_PROGRESS_BAR"

_ENABLED = True


def set_enabled(enabled: bool) -> None:
    """Turn bars on or off for this process (the ``--no-progress-bar`` option of every ``etc-*`` command)."""
    global _ENABLED
    _ENABLED = bool(enabled)


def bars_enabled(stream=None) -> bool:
    """Whether :func:`progress` draws a bar: not switched off (:func:`set_enabled`, :data:`ENV_VAR`) and
    ``stream`` (default stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    if not _ENABLED or os.environ.get(ENV_VAR, "") not in ("", "0"):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def progress(iterable: Iterable[T], desc: str, total: Optional[int] = None, unit: str = "it") -> Iterator[T]:
    """``iterable`` with a progress bar on stderr where :func:`bars_enabled` (else ``iterable`` itself).

    Args:
        desc: what is counted, e.g. ``"hotpotqa train"``.
        total: the number of items if known (``len(iterable)`` is tried otherwise), for a percentage and an ETA.
        unit: the unit of an item (``"ex"``, ``"doc"``, ``"line"``).
    """
    if not bars_enabled():
        return iter(iterable)
    from tqdm import tqdm

    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    return iter(tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, dynamic_ncols=True,
                     mininterval=0.5))
