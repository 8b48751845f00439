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


def load_dictionary(path: PathLike):
    """Load a fairseq ``dict.txt``.

    Args:
        path: the file.
    Returns:
        a ``fairseq.data.Dictionary``.
    """
    from fairseq.data import Dictionary

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
        FileNotFoundError: the split is not there.
    """
    from fairseq.data import data_utils

    bin_dir = Path(bin_dir)
    dictionary = dictionary if dictionary is not None else load_dictionary(dictionary_path(bin_dir))
    ds = data_utils.load_indexed_dataset(str(bin_dir / split), dictionary)
    if ds is None:
        raise FileNotFoundError(f"{bin_dir / split}.bin/.idx: no such binarized split")
    return ds


def load_data_dictionary(data: str, what: str):
    """The dictionary of the first directory of a task's ``data`` option (fairseq's ``:``-separated paths),
    as the pre-training and fine-tuning tasks load it.

    Args:
        data: the option's value.
        what: the directory expected, for the error (e.g. "the bin/ of `etc-prepare pretrain`").
    Raises:
        ValueError: ``data`` is empty.
    """
    from fairseq import utils

    paths = utils.split_paths(data)
    if not paths:
        raise ValueError(f"give the data directory: {what}")
    return load_dictionary(dictionary_path(paths[0]))
