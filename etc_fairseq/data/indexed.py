"""Reading fairseq's binarized (indexed) datasets: the dictionary and one split, with errors that name the
file. :mod:`etc_fairseq.prepare.binarize` writes them; the readers live here, below ``prepare``, so that
datasets do not import the converters. fairseq is imported only when called.
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

PathLike = Union[str, Path]

#: the dictionary's file name in every data directory (binarized pretraining data, prepared fine-tuning data)
DICT_FILE = "dict.txt"


def dictionary_path(data_dir: PathLike) -> Path:
    """``data_dir/dict.txt``."""
    return Path(data_dir) / DICT_FILE


#: the symbols fairseq's ``Dictionary`` adds itself (a ``dict.txt`` line with one of them is a duplicate)
_DICTIONARY_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
#: fairseq's flag at the end of a ``dict.txt`` line that may repeat a symbol on purpose
_OVERWRITE_FLAG = "#fairseq:overwrite"


def check_dictionary_file(path: PathLike) -> int:
    """Check a fairseq ``dict.txt`` the way ``Dictionary.load`` reads it (``SYMBOL COUNT`` per line, an
    optional ``#fairseq:overwrite`` flag), with errors that name the file and line.

    Returns:
        the number of symbols it defines.
    Raises:
        MissingFileError / InputFormatError: missing, a directory, not UTF-8, a malformed line, a duplicate
        symbol (also one of fairseq's own ``<s> <pad> </s> <unk>``), or no symbol at all (every piece
        would become ``<unk>``).
    """
    from etc_fairseq.guards import InputFormatError, iter_input_lines

    first_line = {s: "fairseq's built-in symbols" for s in _DICTIONARY_SPECIALS}
    n = 0
    for line_no, line in iter_input_lines(path, "a fairseq dict.txt"):
        where = f"{path}:{line_no}"
        try:
            word, field = line.rstrip().rsplit(" ", 1)
            overwrite = field == _OVERWRITE_FLAG
            if overwrite:
                word, field = word.rsplit(" ", 1)
            int(field)
        except ValueError:
            raise InputFormatError(f"{where}: expected '<symbol> <count>' (a fairseq dict.txt line), got {line.rstrip()!r}") from None
        if word in first_line and not overwrite:
            raise InputFormatError(f"{where}: duplicate symbol {word!r} (also at {first_line[word]}); a fairseq dict.txt "
                             f"lists each symbol once (or marks a repeat with {_OVERWRITE_FLAG})")
        first_line.setdefault(word, f"line {line_no}")
        n += 1
    if n == 0:
        raise InputFormatError(f"{path}: an empty dictionary (no symbols): every piece would become <unk>; "
                         "give the dict.txt of the model's vocabulary")
    return n


def load_dictionary(path: PathLike):
    """Load a fairseq ``dict.txt`` after :func:`check_dictionary_file` (one-line errors naming the line).

    Args:
        path: the file.
    Returns:
        a ``fairseq.data.Dictionary``.
    """
    from fairseq.data import Dictionary

    check_dictionary_file(path)
    return Dictionary.load(str(path))


def load_split(bin_dir: PathLike, split: str, dictionary=None):
    """Load one binarized split with fairseq's ``data_utils.load_indexed_dataset``.

    Args:
        bin_dir: a directory written by :func:`binarize`.
        split: ``train``, ``valid`` or ``test``.
        dictionary: the dictionary (default: ``bin_dir/dict.txt``).
    Returns:
        the indexed dataset (``len()``, ``ds[i]`` -> LongTensor ending in eos, ``ds.sizes``). Keep the
        dataset object alive while using ``ds.sizes``: fairseq's mmap dataset closes its memory map when
        garbage-collected, and ``load_split(...).sizes.sum()`` then reads unmapped memory (segfault).
    Raises:
        MissingFileError: the split is not there.
    """
    from fairseq.data import data_utils

    from etc_fairseq.errors import MissingFileError

    bin_dir = Path(bin_dir)
    dictionary = dictionary if dictionary is not None else load_dictionary(dictionary_path(bin_dir))
    ds = data_utils.load_indexed_dataset(str(bin_dir / split), dictionary)
    if ds is None:
        raise MissingFileError(f"{bin_dir / split}.bin/.idx: no such binarized split")
    return ds


def load_data_dictionary(data: str, what: str):
    """The dictionary of the first directory of a task's ``data`` option (fairseq's ``:``-separated paths),
    as the pre-training and fine-tuning tasks load it.

    Args:
        data: the option's value.
        what: the directory expected, for the error (e.g. "the bin/ of `etc-prepare pretrain`").
    Raises:
        ConfigError: ``data`` is empty.
    """
    from fairseq import utils

    from etc_fairseq.errors import ConfigError

    paths = utils.split_paths(data)
    if not paths:
        raise ConfigError(f"give the data directory: {what}")
    return load_dictionary(dictionary_path(paths[0]))


_MMAP_MAGIC = b"MMIDIDX\x00\x00"
_MMAP_HEADER = 9 + 8 + 1 + 8  # magic, version <Q, dtype code <B, number of items <Q


def verify_indexed_dataset(prefix) -> int:
    """Check that ``prefix.idx`` / ``prefix.bin`` form a complete fairseq mmap indexed dataset.

    fairseq's ``MMapIndexedDataset`` trusts both files: a truncated ``.bin`` (a copy or a preparation run
    that was cut short) only fails when a training batch reaches the missing items, deep inside numpy.
    This reads the ``.idx`` header, checks the ``.idx`` size (header + int32 sizes + int64 pointers) and
    that the ``.bin`` size equals the end of the last item. Nothing is loaded into memory.

    Args:
        prefix: the path without ``.idx`` / ``.bin``.
    Returns:
        the number of items.
    Raises:
        MissingFileError: a file is missing (the message names it).
        InputFormatError: a file is truncated or not this format (the message names it and what was expected).
    """
    import struct

    import numpy as np
    from fairseq.data.indexed_dataset import _code_to_dtype

    from etc_fairseq.errors import InputFormatError, MissingFileError

    idx, bin_ = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    for p in (idx, bin_):
        if not p.is_file():
            raise MissingFileError(f"{p}: missing (prepared data incomplete; re-run etc-prepare)")
    hint = "the prepared data is truncated or corrupt; re-run etc-prepare"
    with open(idx, "rb") as f:
        header = f.read(_MMAP_HEADER)
        if len(header) < _MMAP_HEADER or header[:9] != _MMAP_MAGIC:
            raise InputFormatError(f"{idx}: not a fairseq mmap index (bad or short header); {hint}")
        (version,) = struct.unpack("<Q", header[9:17])
        (code,) = struct.unpack("<B", header[17:18])
        (n,) = struct.unpack("<Q", header[18:26])
        if version != 1 or code not in _code_to_dtype:
            raise InputFormatError(f"{idx}: unsupported index version {version} / dtype code {code}; {hint}")
    expected_idx = _MMAP_HEADER + 12 * n
    if idx.stat().st_size < expected_idx:
        raise InputFormatError(f"{idx}: {idx.stat().st_size} bytes, the header announces {n} items ({expected_idx} bytes); {hint}")
    itemsize = np.dtype(_code_to_dtype[code]).itemsize
    expected_bin = 0
    if n:
        mm = np.memmap(idx, mode="r", dtype=np.uint8)
        size = int(np.frombuffer(mm, dtype=np.int32, count=1, offset=_MMAP_HEADER + 4 * (n - 1))[0])
        pointer = int(np.frombuffer(mm, dtype=np.int64, count=1, offset=_MMAP_HEADER + 4 * n + 8 * (n - 1))[0])
        del mm
        expected_bin = pointer + size * itemsize
    actual = bin_.stat().st_size
    if actual != expected_bin:
        raise InputFormatError(f"{bin_}: {actual} bytes, its index {idx.name} needs {expected_bin} for {n} items; {hint}")
    return n


def check_value_range(prefix, low: int, high: int, what: str, item_size: int = 1) -> None:
    """Refuse stored values outside ``[low, high)`` in the mmap indexed dataset ``prefix.bin`` (checked by
    :func:`verify_indexed_dataset` first): token ids beyond the dictionary, labels beyond the classes. The
    model would fail on the first batch that holds one (an ``IndexError`` deep inside an embedding) or,
    worse, read another row. The ``.bin`` is scanned in chunks through a memory map.

    Args:
        prefix: the path without ``.idx`` / ``.bin``.
        low, high: the allowed values ``low <= v < high``.
        what: what the values must be, for the message (e.g. "ids of DATA/dict.txt (1009 entries)").
        item_size: stored values per position of an item (a field stored flattened with a trailing shape),
            to report the item a bad value belongs to.
    Raises:
        InputFormatError: the first value outside the range, naming the file, the item and the value.
    """
    import numpy as np
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    from etc_fairseq.errors import InputFormatError

    verify_indexed_dataset(prefix)
    ds = MMapIndexedDataset(str(prefix))
    values = np.frombuffer(ds._bin_buffer, dtype=ds._index.dtype)
    chunk = 1 << 24
    for start in range(0, len(values), chunk):
        part = values[start:start + chunk]
        bad = (part < low) | (part >= high)
        if bad.any():
            at = start + int(np.argmax(bad))
            pointers = np.asarray(ds._index._pointers, dtype=np.int64) // np.dtype(ds._index.dtype).itemsize
            item = int(np.searchsorted(pointers, at, side="right")) - 1
            raise InputFormatError(
                f"{prefix}.bin: item {item} (position {(at - int(pointers[item])) // item_size}) holds {int(values[at])}; "
                f"expected {what}, in [{low}, {high}). The data was prepared with another dictionary or class list, "
                "or changed since; prepare it again"
            )
