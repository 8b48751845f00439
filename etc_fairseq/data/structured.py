"""The on-disk format and the fairseq dataset shared by every structured fine-tuning task (HotpotQA,
WikiHop, NQ, OpenKP): one example = a set of named arrays, stored field by field with fairseq's own
memory-mapped indexed dataset format (``{split}.{field}.bin/.idx``).

Layout of a prepared directory ``DIR`` (what ``etc-prepare <dataset>`` writes, atomically)::

    DIR/dict.txt                      fairseq Dictionary of the word pieces
    DIR/{split}.{field}.bin / .idx    one fairseq MMapIndexedDataset per field (item i = example i)
    DIR/{split}.meta.json             {"num_examples", "fields": {name: {"dtype", "trailing_shape"}}, ...}
    DIR/{split}.side.jsonl            (optional) one JSON object per example: ids, texts and offsets that
                                      predictions and official metrics need (task-defined)

Core fields (see :data:`CORE_FIELDS`; any example has the first three):

- ``long_tokens``   int64 [long_len]: dictionary ids of the long input.
- ``global_tokens`` int64 [global_len]: dictionary ids of the global tokens
  (:func:`etc_fairseq.structure.global_tokens.global_token_id`).
- ``global_types``  int64 [global_len]: :class:`~etc_fairseq.structure.global_tokens.GlobalTokenType`.
- structure ids, all optional, meaning as in :func:`etc_fairseq.structure.builders.build_structure`:
  ``long_segment`` [long_len], ``global_parent`` [global_len], ``long_context`` [long_len],
  ``global_context`` [global_len], ``long_links`` [long_len, K], ``global_hard_g2l`` [global_len].

Task fields (labels, features) are declared by the task with a :class:`FieldSpec` and end up in
``sample["target"][name]`` (or ``sample["net_input"][name]`` for ``role="net_input"``).

Multi-dimensional fields are stored flattened; ``trailing_shape`` (all dims but the first) is in the
meta file. fairseq's reader casts everything to int64, so float fields are read here directly from the
same files (:class:`FieldReader`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from fairseq.data import FairseqDataset
from fairseq.data.indexed_dataset import (
    MMapIndexedDataset,
    MMapIndexedDatasetBuilder,
    data_file_path,
    index_file_path,
)

from etc_fairseq.data.batching import pad_stack
from etc_fairseq.errors import InputFormatError, MissingFileError

PathLike = Union[str, Path]

#: where a field goes in a collated batch
ROLES = ("src_tokens", "net_input", "structure", "target")


@dataclass(frozen=True)
class FieldSpec:
    """One stored field.

    Attributes:
        name: file and batch key.
        dtype: numpy dtype name on disk: ``int64``, ``int32``, ``int16``, ``int8``, ``uint8``, ``float64``.
        pad: value of padding positions in a batch; ``"pad"`` = the dictionary's pad index.
        role: ``src_tokens`` (the long input), ``net_input`` (a model input), ``structure`` (a structure-id
            input for :func:`~etc_fairseq.structure.builders.build_structure`) or ``target``.
        length: which length the first dim follows when padding a batch: ``long``, ``global`` or ``own``
            (padded to the longest in the batch; with fixed-length padding, to the longest in the split).
        required: every prepared split must have it (loading refuses a split without it); an optional
            field (the structure ids, which a layout may leave out; a field a task added after data was
            prepared) is loaded where it was prepared and absent from the batches elsewhere.
    """

    name: str
    dtype: str = "int64"
    pad: Union[int, float, str] = 0
    role: str = "target"
    length: str = "own"
    required: bool = True

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"field {self.name!r}: role must be one of {ROLES}, got {self.role!r}")
        if self.length not in ("long", "global", "own"):
            raise ValueError(f"field {self.name!r}: length must be long, global or own, got {self.length!r}")
        np.dtype(self.dtype)


CORE_FIELDS: Dict[str, FieldSpec] = {
    f.name: f
    for f in (
        FieldSpec("long_tokens", pad="pad", role="src_tokens", length="long", required=True),
        FieldSpec("global_tokens", pad="pad", role="net_input", length="global", required=True),
        FieldSpec("global_types", pad=0, role="net_input", length="global", required=True),
        FieldSpec("long_segment", pad=-1, role="structure", length="long", required=False),
        FieldSpec("global_parent", pad=-1, role="structure", length="global", required=False),
        FieldSpec("long_context", pad=0, role="structure", length="long", required=False),
        FieldSpec("global_context", pad=0, role="structure", length="global", required=False),
        FieldSpec("long_links", pad=-1, role="structure", length="long", required=False),
        FieldSpec("global_hard_g2l", pad=0, role="structure", length="global", required=False),
    )
}


class StructuredWriter:
    """Writes one split, example by example, into a directory (normally the temporary directory of
    :func:`etc_fairseq.prepare.atomic.atomic_directory`).

    Args:
        out_dir: directory to write into.
        split: split name (``train``, ``valid``, ...).
        fields: the specs of every field the examples carry (core fields are added when named).
    """

    def __init__(self, out_dir: PathLike, split: str, fields: Sequence[FieldSpec]):
        self.out_dir = Path(out_dir)
        self.split = split
        self.specs: Dict[str, FieldSpec] = {f.name: f for f in fields}
        for name in ("long_tokens", "global_tokens", "global_types"):
            self.specs.setdefault(name, CORE_FIELDS[name])
        self._builders = {
            name: MMapIndexedDatasetBuilder(str(self._prefix(name)) + ".bin", dtype=np.dtype(spec.dtype).type)
            for name, spec in self.specs.items()
        }
        self._trailing: Dict[str, Tuple[int, ...]] = {}
        self._side = None
        self.num_examples = 0
        self.meta: Dict[str, object] = {}

    def _prefix(self, name: str) -> Path:
        return self.out_dir / f"{self.split}.{name}"

    def add(self, arrays: Mapping[str, np.ndarray], side: Optional[dict] = None) -> None:
        """Append one example.

        Args:
            arrays: one array per declared field (all must be present); first dim = the field's length.
            side: a JSON-serialisable dict for ``{split}.side.jsonl`` (give it for all examples or none).
        Raises:
            ValueError: a field is missing, unknown, or has a trailing shape other than earlier examples'.
        """
        missing = set(self.specs) - set(arrays)
        unknown = set(arrays) - set(self.specs)
        if missing or unknown:
            raise ValueError(f"example {self.num_examples}: missing fields {sorted(missing)}, unknown {sorted(unknown)}")
        for name, value in arrays.items():
            a = np.asarray(value, dtype=np.dtype(self.specs[name].dtype))
            if a.ndim == 0:
                a = a.reshape(1)
            trailing = tuple(a.shape[1:])
            if self._trailing.setdefault(name, trailing) != trailing:
                raise ValueError(
                    f"example {self.num_examples}: field {name!r} has trailing shape {trailing}, earlier "
                    f"examples {self._trailing[name]}"
                )
            self._builders[name].add_item(torch.from_numpy(np.ascontiguousarray(a).reshape(-1)))
        if side is not None:
            if self._side is None:
                if self.num_examples:
                    raise ValueError("side data must be given for every example or none")
                self._side = open(side_path(self.out_dir, self.split), "w", encoding="utf-8")
            self._side.write(json.dumps(side, ensure_ascii=False) + "\n")
        elif self._side is not None:
            raise ValueError(f"example {self.num_examples}: side data missing (earlier examples had it)")
        self.num_examples += 1

    def finalize(self, **meta) -> Path:
        """Close the files and write ``{split}.meta.json`` (with ``meta`` merged in). Returns its path."""
        for name, b in self._builders.items():
            b.finalize(str(self._prefix(name)) + ".idx")
        if self._side is not None:
            self._side.close()
        self.meta.update(meta)
        info = {
            "num_examples": self.num_examples,
            "fields": {
                name: {
                    "dtype": spec.dtype,
                    "trailing_shape": list(self._trailing.get(name, ())),
                }
                for name, spec in self.specs.items()
            },
            "has_side": self._side is not None,
            **self.meta,
        }
        path = self.out_dir / f"{self.split}.meta.json"
        path.write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return path


class FieldReader:
    """Random access to one stored field, keeping its dtype (fairseq's reader casts to int64)."""

    def __init__(self, prefix: PathLike, dtype: str, trailing_shape: Sequence[int]):
        from etc_fairseq.data.indexed import verify_indexed_dataset

        prefix = str(prefix)
        for p in (index_file_path(prefix), data_file_path(prefix)):
            if not Path(p).is_file():
                raise MissingFileError(f"{p}: missing (prepared data incomplete; re-run etc-prepare)")
        verify_indexed_dataset(prefix)  # truncated/corrupt files: a clear error here, not mid-epoch
        self._ds = MMapIndexedDataset(prefix)
        self.dtype = np.dtype(dtype)
        if self._ds._index.dtype != self.dtype:
            raise InputFormatError(f"{prefix}.idx: stored dtype {np.dtype(self._ds._index.dtype)}, its meta.json "
                                   f"says {self.dtype}; re-run etc-prepare")
        self.trailing_shape = tuple(int(x) for x in trailing_shape)
        self.sizes = self._ds.sizes // max(int(np.prod(self.trailing_shape)), 1)

    def __len__(self) -> int:
        return len(self._ds)

    def __getitem__(self, i: int) -> np.ndarray:
        ptr, size = self._ds._index[i]
        a = np.frombuffer(self._ds._bin_buffer, dtype=self.dtype, count=size, offset=ptr)
        # a copy, not a view: a view into the memory map crashes if used after the dataset is collected
        return a.reshape((-1,) + self.trailing_shape).copy()


def read_meta(data_dir: PathLike, split: str) -> dict:
    """``{split}.meta.json`` of a prepared directory, checked: a JSON object with ``num_examples`` (an int
    >= 0) and ``fields`` (``{name: {"dtype": str, "trailing_shape": [int, ...]}}``); a clear error naming the
    file and field otherwise, or if the split was not prepared."""
    from etc_fairseq.guards import load_json_file

    path = Path(data_dir) / f"{split}.meta.json"
    if not path.is_file():
        raise MissingFileError(f"{path}: no such prepared split (run etc-prepare first; splits present: "
                               f"{sorted(p.name[:-len('.meta.json')] for p in Path(data_dir).glob('*.meta.json'))})")
    meta = load_json_file(path, "the meta file etc-prepare writes for a split")
    if not isinstance(meta, dict):
        raise InputFormatError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    n = meta.get("num_examples")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise InputFormatError(f"{path}: field 'num_examples': expected an int >= 0, got {json.dumps(n)}")
    fields = meta.get("fields")
    if not isinstance(fields, dict):
        raise InputFormatError(f"{path}: field 'fields': expected an object {{name: {{dtype, trailing_shape}}}}, "
                               f"got {json.dumps(fields)[:80]}")
    for name, f in fields.items():
        ok = isinstance(f, dict) and isinstance(f.get("dtype"), str) and isinstance(f.get("trailing_shape"), list) \
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in f["trailing_shape"])
        if ok:
            try:
                np.dtype(f["dtype"])
            except TypeError:
                ok = False
        if not ok:
            raise InputFormatError(f"{path}: field 'fields.{name}': expected {{\"dtype\": a numpy dtype name, "
                                   f"\"trailing_shape\": [positive ints]}}, got {json.dumps(f)[:80]}")
    return meta


def side_path(data_dir: PathLike, split: str) -> Path:
    """Where a split's side records are: ``DIR/{split}.side.jsonl``."""
    return Path(data_dir) / f"{split}.side.jsonl"


class SideRecords:
    """The side records of a split (``{split}.side.jsonl``, one JSON object per example), with random access
    by byte offsets so that they are not all held in memory. A bad line is an InputFormatError naming the
    file and line, raised when that line is read.

    Safe to pickle into data-loader workers: the file is (re)opened per process.
    """

    def __init__(self, path: PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise MissingFileError(f"{self.path}: no such side file (re-run etc-prepare for this split)")
        offsets = [0]
        with open(self.path, "rb") as f:
            for line in f:
                offsets.append(offsets[-1] + len(line))
        self.offsets = np.asarray(offsets, dtype=np.int64)  # [n + 1]
        self._fh = None
        self._pid = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(f"{self.path}: record {i} out of range ({len(self)} records)")
        if self._fh is None or self._pid != os.getpid():
            self._fh = open(self.path, "rb")
            self._pid = os.getpid()
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        self._fh.seek(start)
        return self._decode(self._fh.read(end - start), i + 1)

    def __iter__(self) -> Iterator[dict]:
        with open(self.path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                yield self._decode(raw, lineno)

    def _decode(self, raw: bytes, lineno: int) -> dict:
        from etc_fairseq.guards import decode_utf8, parse_json

        where = f"{self.path}:{lineno}"
        record = parse_json(decode_utf8(raw, where), where)
        if not isinstance(record, dict):
            raise InputFormatError(f"{where}: expected a JSON object (a side record), got {type(record).__name__}")
        return record

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fh"] = None
        state["_pid"] = None
        return state


def read_side(data_dir: PathLike, split: str) -> List[dict]:
    """All side records of a split (one dict per example), read and checked now."""
    return list(SideRecords(side_path(data_dir, split)))


class StructuredDataset(FairseqDataset):
    """A prepared split as a fairseq dataset. Items are dicts of numpy arrays; :meth:`collater` pads a batch.

    Args:
        data_dir: the prepared directory.
        split: split name.
        fields: specs of the fields to load (core fields are known; the task adds its own). Fields in the
            meta file but not named here are ignored; a named field missing on disk is an error if it
            is ``required`` (an optional one, e.g. a field a task added after the data was prepared, is
            then absent from the batches).
        pad_idx: the dictionary's pad index.
        max_long_len / max_global_len: pad every batch to these lengths when ``pad_to_fixed_length``
            (identical shapes for XLA / compiled models); examples must fit.
        value_ranges: ``{field: (low, high, what)}``: refuse stored values outside ``[low, high)`` when
            the split is loaded (:func:`~etc_fairseq.data.indexed.check_value_range`; ``what`` says what
            they must be), e.g. token ids beyond the dictionary, which the model would fail on mid-epoch.
    """

    def __init__(
        self,
        data_dir: PathLike,
        split: str,
        fields: Iterable[FieldSpec],
        pad_idx: int,
        max_long_len: Optional[int] = None,
        max_global_len: Optional[int] = None,
        pad_to_fixed_length: bool = False,
        value_ranges: Optional[Mapping[str, Tuple[int, int, str]]] = None,
    ):
        from etc_fairseq.data.indexed import check_value_range

        super().__init__()
        self.data_dir = Path(data_dir)
        self.split = split
        self.meta = read_meta(data_dir, split)
        stored = self.meta["fields"]
        self.specs: Dict[str, FieldSpec] = {}
        for spec in list(CORE_FIELDS.values()) + list(fields):
            if spec.name not in stored:
                if spec.required:
                    raise InputFormatError(
                        f"{self.data_dir}/{split}.meta.json: field {spec.name!r} was not prepared (fields: "
                        f"{sorted(stored)}); re-run etc-prepare with a matching version"
                    )
                continue
            self.specs[spec.name] = spec
        self.readers = {
            name: FieldReader(self.data_dir / f"{split}.{name}", stored[name]["dtype"], stored[name]["trailing_shape"])
            for name in self.specs
        }
        n = int(self.meta["num_examples"])
        for name, r in self.readers.items():
            if len(r) != n:
                raise InputFormatError(f"{self.data_dir}/{split}.{name}: {len(r)} items, {split}.meta.json says "
                                       f"{n} examples; re-run etc-prepare")
        for name, (low, high, what) in (value_ranges or {}).items():
            if name in self.readers:
                check_value_range(self.data_dir / f"{split}.{name}", low, high, what,
                                  max(int(np.prod(self.readers[name].trailing_shape)), 1))
        self.pad_idx = pad_idx
        self.long_sizes = np.asarray(self.readers["long_tokens"].sizes, dtype=np.int64)
        self.global_sizes = np.asarray(self.readers["global_tokens"].sizes, dtype=np.int64)
        self.max_long_len = max_long_len
        self.max_global_len = max_global_len
        self.pad_to_fixed_length = pad_to_fixed_length
        if pad_to_fixed_length and (max_long_len is None or max_global_len is None):
            raise ValueError("pad_to_fixed_length needs max_long_len and max_global_len")
        # with fixed-length padding, "own"-length fields are padded to their longest in the split (static shapes)
        self.own_lengths = {
            name: max(int(r.sizes.max()) if len(r) else 0, 1) for name, r in self.readers.items() if self.specs[name].length == "own"
        }
        for what, sizes, limit in (("long", self.long_sizes, max_long_len), ("global", self.global_sizes, max_global_len)):
            if limit is not None and len(sizes) and sizes.max() > limit:
                raise InputFormatError(
                    f"{self.data_dir}/{split}: an example has {what} length {int(sizes.max())} > {limit}; "
                    f"prepare with a smaller --max-{what}-len or raise the task's max_{what}_len"
                )

    def __len__(self) -> int:
        return int(self.meta["num_examples"])

    @property
    def sizes(self) -> np.ndarray:
        return self.long_sizes

    def num_tokens(self, index: int) -> int:
        return int(self.long_sizes[index] + self.global_sizes[index])

    def num_tokens_vec(self, indices):
        return self.long_sizes[indices] + self.global_sizes[indices]

    def size(self, index: int) -> int:
        return int(self.long_sizes[index])

    def ordered_indices(self) -> np.ndarray:
        return np.argsort(self.long_sizes, kind="mergesort")

    def __getitem__(self, index: int) -> Dict[str, object]:
        item = {name: r[index] for name, r in self.readers.items()}
        item["id"] = int(index)
        return item

    def _pad_value(self, spec: FieldSpec):
        return self.pad_idx if spec.pad == "pad" else spec.pad

    def collater(self, samples: List[Dict[str, object]]) -> Dict[str, object]:
        """Pad a list of items into a batch.

        Returns ``{"id": int64 [B], "nsentences": B, "ntokens": long tokens, "net_input": {"src_tokens":
        int64 [B, L], "global_tokens"/"global_types": int64 [B, G], "structure": {...} , other net_input
        fields}, "target": {task fields}}``; ``L``/``G`` are the batch maxima (or the fixed lengths; then
        ``own``-length fields are padded to their longest in the split, so every full batch has one shape).
        """
        if len(samples) == 0:
            return {}
        bsz = len(samples)
        L = self.max_long_len if self.pad_to_fixed_length else max(max(len(s["long_tokens"]) for s in samples), 1)
        G = self.max_global_len if self.pad_to_fixed_length else max(max(len(s["global_tokens"]) for s in samples), 1)
        batch: Dict[str, Dict[str, torch.Tensor]] = {"net_input": {}, "structure": {}, "target": {}}
        for name, spec in self.specs.items():
            arrays = [s[name] for s in samples]
            if spec.length == "own":
                n = self.own_lengths[name] if self.pad_to_fixed_length else max(max(len(a) for a in arrays), 1)
            else:
                n = L if spec.length == "long" else G
            dtype = torch.float32 if np.dtype(spec.dtype).kind == "f" else torch.long
            out = pad_stack(arrays, n, self._pad_value(spec), dtype)
            if spec.role == "src_tokens":
                batch["net_input"]["src_tokens"] = out
            elif spec.role == "net_input":
                batch["net_input"][name] = out
            else:
                batch[spec.role][name] = out
        batch["net_input"]["structure"] = batch.pop("structure")
        lengths = [len(s["long_tokens"]) for s in samples]
        batch["net_input"]["src_lengths"] = torch.tensor(lengths, dtype=torch.long)
        return {
            "id": torch.tensor([s["id"] for s in samples], dtype=torch.long),
            "nsentences": bsz,
            "ntokens": int(sum(lengths)),
            "net_input": batch["net_input"],
            "target": batch["target"],
        }
