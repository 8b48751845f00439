"""The real English Wikipedia sample used by the examples and tests, fetched from a PyPI wheel.

The gensim 4.4.0 wheel ships, as test data, a shortened English Wikipedia ``pages-articles`` dump from
May 2016 (206 pages: about 100 full articles, the rest redirects). It is real Wikipedia text, licensed
CC BY-SA 3.0 by the Wikipedia contributors (see ``examples/data/ATTRIBUTION.md``). Nothing is committed to
this repository: :func:`fetch_wikipedia_sample` downloads the wheel with pip (a package registry, the only
network source this project uses), copies the one member out of it and deletes the wheel.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Optional

from etc_fairseq.errors import ExternalToolError

from .documents import PathLike

logger = logging.getLogger(__name__)

GENSIM_VERSION = "4.4.0"
SAMPLE_MEMBER = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
SAMPLE_FILENAME = "enwiki-20160501-sample-gensim-4.4.0.xml.bz2"
# Recorded from the first fetch; the member is the same in every platform's wheel and in the sdist.
SAMPLE_SIZE = 1_695_871
SAMPLE_SHA256 = "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d"
SAMPLE_LICENSE = "CC BY-SA 3.0, Wikipedia contributors (https://en.wikipedia.org/wiki/Wikipedia:Copyrights)"

# The wheel is only read as a zip, never installed, so any platform's wheel does; pinning one makes the
# download identical on every host (and works where no wheel for the host's Python exists).
_PIP_PLATFORM_ARGS = [
    "--only-binary=:all:",
    "--platform",
    "manylinux_2_28_x86_64",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
]


class SampleDataError(ExternalToolError):
    """The sample could not be fetched or does not match what was recorded."""


def default_cache_dir() -> Path:
    """Where fetched data lives by default.

    Returns:
        ``$ETC_FAIRSEQ_CACHE`` when set, else ``~/.cache/etc-fairseq``.
    """
    env = os.environ.get("ETC_FAIRSEQ_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "etc-fairseq"


def sha256_file(path: PathLike) -> str:
    """Hex SHA-256 of a file (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _is_valid(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == SAMPLE_SIZE and sha256_file(path) == SAMPLE_SHA256


def pip_download(requirement: str, dest: Path, timeout: float, what: str) -> Path:
    """Download one distribution (``NAME==VERSION``, no dependencies) into the empty directory ``dest`` with
    this interpreter's pip, the wheel of the pinned platform (:data:`_PIP_PLATFORM_ARGS`; a pure-Python wheel
    matches it too); returns the downloaded file. ``what``: what is read out of it, for the messages.

    Raises:
        SampleDataError: pip failed or timed out (the message says the package index must be reachable).
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(dest)]
    cmd += _PIP_PLATFORM_ARGS + [requirement]
    logger.info("fetching %s: %s", what, " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SampleDataError(
            f"pip download of {requirement} did not finish within {timeout:.0f} s; "
            "check access to the package index (PyPI or PIP_INDEX_URL)"
        ) from None
    files = sorted(dest.iterdir())
    if proc.returncode != 0 or not files:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise SampleDataError(
            f"could not download {requirement} with pip (exit code {proc.returncode}). {what[:1].upper()}{what[1:]} is read out of "
            "that package, so the package index (PyPI, or the one PIP_INDEX_URL names) must be reachable.\n"
            f"pip said:\n{tail}"
        )
    return files[0]


def _pip_download(dest: Path, timeout: float) -> Path:
    """Download the gensim distribution into ``dest`` with pip; returns the downloaded file."""
    try:
        return pip_download(f"gensim=={GENSIM_VERSION}", dest, timeout, "the Wikipedia sample")
    except SampleDataError as e:
        if "did not finish" in str(e):
            raise
        raise SampleDataError(str(e).replace("reachable.", "reachable; alternatively pass a local dump or text "
                                             "file with --input.", 1)) from None


def _extract_member(archive: Path, out: Path) -> None:
    """Copy the sample out of a wheel (zip) or an sdist (tar.gz) into ``out``."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            try:
                with z.open(SAMPLE_MEMBER) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except KeyError:
                raise SampleDataError(f"{archive}: has no member {SAMPLE_MEMBER}") from None
        return
    with tarfile.open(archive) as t:
        for m in t.getmembers():
            if m.name.endswith("/" + SAMPLE_MEMBER):
                src = t.extractfile(m)
                if src is not None:
                    with src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    return
    raise SampleDataError(f"{archive}: has no member ending in {SAMPLE_MEMBER}")


def fetch_wikipedia_sample(cache_dir: Optional[PathLike] = None, timeout: float = 600.0) -> Path:
    """Return the path of the real Wikipedia dump sample, fetching it once into ``cache_dir``.

    Reuses ``cache_dir/SAMPLE_FILENAME`` when its size and SHA-256 match the recorded ones; otherwise runs
    ``python -m pip download --no-deps gensim==4.4.0`` (this interpreter's pip), copies the dump member out
    of the wheel, verifies it, and moves it into place atomically (concurrent fetches are safe). A small
    ``.json`` provenance record (source, licence, size, sha256, fetch time) is written next to it.

    Args:
        cache_dir: directory for the sample; ``None`` means :func:`default_cache_dir`.
        timeout: seconds allowed for pip.
    Returns:
        path to the ``.xml.bz2`` dump (1.7 MB compressed, about 6 MB of XML).
    Raises:
        SampleDataError: pip could not reach the registry, or the file does not match the recorded hash.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache / SAMPLE_FILENAME
    if _is_valid(target):
        logger.info("Wikipedia sample: reusing %s", target)
        return target
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache) as tmp:
        tmp = Path(tmp)
        (tmp / "dl").mkdir()
        archive = _pip_download(tmp / "dl", timeout)
        part = tmp / SAMPLE_FILENAME
        _extract_member(archive, part)
        size, digest = part.stat().st_size, sha256_file(part)
        if size != SAMPLE_SIZE or digest != SAMPLE_SHA256:
            raise SampleDataError(
                f"{archive.name}:{SAMPLE_MEMBER} has size {size} and sha256 {digest}, expected {SAMPLE_SIZE} "
                f"and {SAMPLE_SHA256}; the package on the index is not the one this code was written for"
            )
        os.replace(part, target)
    record = {
        "source": f"PyPI gensim=={GENSIM_VERSION} ({archive.name}), member {SAMPLE_MEMBER}",
        "content": "English Wikipedia pages-articles dump sample, May 2016",
        "license": SAMPLE_LICENSE,
        "size": SAMPLE_SIZE,
        "sha256": SAMPLE_SHA256,
        "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    meta = target.with_name(target.name + ".json")
    meta_tmp = meta.with_name(f".{meta.name}.{os.getpid()}")
    meta_tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(meta_tmp, meta)
    logger.info("Wikipedia sample: fetched %s in %.1f s", target, time.monotonic() - t0)
    return target
