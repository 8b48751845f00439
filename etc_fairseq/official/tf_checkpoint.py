"""Read TensorFlow name-based checkpoints (``model.ckpt.index`` + ``model.ckpt.data-*``) without TensorFlow.

Why a reader of our own: no maintained package on PyPI reads TensorFlow's checkpoint format without
TensorFlow itself (``tf.train.load_checkpoint`` is TensorFlow's C++ reader; the other packages that mention
checkpoints wrap TensorFlow or handle other formats). Installing TensorFlow (hundreds of MB) only to read
~200 arrays is out of proportion, and the format is small and stable, so this module decodes it directly
with the standard library and numpy. The protobuf messages are decoded by hand (only the few fields read
here), which also avoids a dependency on the ``protobuf`` package and on TensorFlow's generated classes.

The format (a "tensor bundle", what ``tf.compat.v1.train.Saver`` and ``tf.train.Checkpoint`` write):

``PREFIX.index``
    A LevelDB-style sorted string table. Every block (data blocks, the metaindex block, the index block)
    is followed by a 5-byte trailer: one compression-type byte and the masked CRC-32C of the block bytes
    plus that type byte. The last 48 bytes are the footer: two block handles (varint offset, varint size)
    for the metaindex and index blocks, zero padding, and the little-endian magic 0xdb4775248b80fb57.
    A block holds entries ``varint shared_key_len, varint unshared_key_len, varint value_len,
    unshared key bytes, value bytes`` (each key shares a prefix with the previous one), then a uint32
    array of restart offsets and its uint32 length. The index block's values are the handles of the
    data blocks. TensorFlow's BundleWriter writes every block uncompressed (type 0); a snappy-compressed
    block (type 1) is refused with a clear error rather than half-supported.

    Entries: key ``""`` holds a ``BundleHeaderProto`` (field 1 num_shards, field 2 endianness, 0 = little);
    every other key is a variable name holding a ``BundleEntryProto`` (1 dtype enum, 2 shape
    ``TensorShapeProto`` of ``Dim`` messages with field 1 size, 3 shard_id, 4 offset, 5 size, 6 fixed32
    masked CRC-32C of the tensor bytes, 7 slices of a partitioned variable).

``PREFIX.data-SSSSS-of-NNNNN``
    Raw little-endian tensor bytes, C order, at the entry's offset.

Integrity: every index block's CRC is checked, and every tensor's CRC-32C is verified against its entry
(TensorFlow stores it masked, as LevelDB does: ``rot_right(crc, 15) + 0xa282ead8``). The CRC is computed
with numpy (many chunks in parallel, then combined through the CRC's linearity), about a few seconds per GB,
so a corrupted download is caught before conversion rather than producing a silently wrong model.

Supported dtypes: float16/32/64, bfloat16 (returned as float32, exactly: bfloat16 is the top half of a
float32), int8/16/32/64, uint8/16/32/64, bool, complex64/128. Strings, resources, variants and partitioned
(sliced) variables are refused by name.

Public API::

    list_variables(prefix)        -> {name: (dtype_name, shape)}     (index only, no tensor data read)
    read_tf_checkpoint(prefix)    -> {name: numpy array}
    TFCheckpointReader(prefix)    .variables, .read(name): one variable at a time, for large checkpoints

``prefix`` is the checkpoint prefix (``dir/model.ckpt``) or a directory holding exactly one checkpoint
(its ``checkpoint`` file, if present, names the prefix). Every problem raises :class:`TFCheckpointError`
with a one-line message naming the file and, where there is one, the variable.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from etc_fairseq.checkpoint_io import CheckpointLoadError

PathLike = Union[str, os.PathLike]

__all__ = [
    "TFCheckpointError",
    "TFVariable",
    "TFCheckpointReader",
    "list_variables",
    "read_tf_checkpoint",
    "resolve_checkpoint_prefix",
    "crc32c",
    "mask_crc32c",
]


class TFCheckpointError(CheckpointLoadError):
    """A TensorFlow checkpoint is missing, truncated, corrupted or uses a feature this reader does not read.

    A :class:`~etc_fairseq.checkpoint_io.CheckpointLoadError` (the project's one checkpoint error), so
    callers that read any kind of checkpoint catch one class."""


# ----------------------------------------------------------------------------------------------------
# CRC-32C (Castagnoli), as LevelDB and TensorFlow use it
# ----------------------------------------------------------------------------------------------------

_CRC_POLY = 0x82F63B78  # reflected Castagnoli polynomial


def _make_crc_table() -> List[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (_CRC_POLY if c & 1 else 0)
        table.append(c)
    return table


_CRC_TABLE = _make_crc_table()
_CRC_TABLE_NP = np.array(_CRC_TABLE, dtype=np.uint32)  # <uint32>[256]


def _crc_register_update(register: int, data: bytes) -> int:
    """Advance the raw CRC register (no pre/post inversion) over ``data``, one byte at a time."""
    table = _CRC_TABLE
    for byte in data:
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


# The register update is linear over GF(2): feeding n zero bytes maps a register c to M_n c, and
# update(c, data) = M_len(data) c XOR update(0, data). A linear map of 32-bit vectors is stored as its
# 32 columns (<uint32>[32]: column k is the image of 1 << k).


def _apply_operator(columns: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``M x`` for every element of ``x`` (<uint32>[n]) with ``M`` given by its columns (<uint32>[32])."""
    out = np.zeros_like(x)
    for k in range(32):
        out ^= np.where((x >> np.uint32(k)) & np.uint32(1), columns[k], np.uint32(0))
    return out


_ONE_ZERO_BYTE = np.array([_crc_register_update(1 << k, b"\0") for k in range(32)], dtype=np.uint32)


def _zeros_operator(n: int) -> np.ndarray:
    """Columns (<uint32>[32]) of M_n, the register map for feeding ``n`` zero bytes (square and multiply)."""
    result = np.array([1 << k for k in range(32)], dtype=np.uint32)  # identity
    power = _ONE_ZERO_BYTE
    while n:
        if n & 1:
            result = _apply_operator(power, result)
        n >>= 1
        if n:
            power = _apply_operator(power, power)
    return result


def crc32c(data: Union[bytes, bytearray, memoryview, np.ndarray]) -> int:
    """CRC-32C of ``data`` (standard: initial register 0xFFFFFFFF, final inversion); e.g. b"123456789" -> 0xE3069283.

    Large inputs are split into ``k`` equal chunks whose raw CRCs are computed side by side with numpy
    (one vectorised table step per byte position), then combined pairwise with the zero-feeding operator.
    """
    buf = np.frombuffer(bytes(data) if not isinstance(data, np.ndarray) else data.tobytes(), dtype=np.uint8)
    n = buf.size
    if n < (1 << 16):
        return _crc_register_update(0xFFFFFFFF, buf.tobytes()) ^ 0xFFFFFFFF
    # k = number of chunks (a power of two, so the pairwise combination below halves evenly).
    k = 1 << min(14, (n.bit_length() - 1) // 2)
    m = n // k  # chunk length
    rows = np.ascontiguousarray(buf[: k * m].reshape(k, m).T)  # <uint8>[m, k]: byte j of every chunk
    reg = np.zeros(k, dtype=np.uint32)  # raw registers, one per chunk, started at 0
    idx = np.empty(k, dtype=np.uint32)
    for j in range(m):
        np.bitwise_xor(reg, rows[j], out=idx)
        np.bitwise_and(idx, np.uint32(0xFF), out=idx)
        np.right_shift(reg, np.uint32(8), out=reg)
        np.bitwise_xor(reg, _CRC_TABLE_NP[idx], out=reg)
    # Combine neighbours: update(0, A || B) = M_len(B) update(0, A) XOR update(0, B).
    span = m
    while reg.size > 1:
        reg = _apply_operator(_zeros_operator(span), reg[0::2]) ^ reg[1::2]
        span *= 2
    register = _crc_register_update(int(reg[0]), buf[k * m :].tobytes())  # the tail
    init = _apply_operator(_zeros_operator(n), np.array([0xFFFFFFFF], dtype=np.uint32))
    return (int(init[0]) ^ register) ^ 0xFFFFFFFF


def mask_crc32c(crc: int) -> int:
    """LevelDB/TensorFlow CRC masking: rotate right by 15 bits and add 0xa282ead8 (mod 2**32)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# ----------------------------------------------------------------------------------------------------
# varints, protobuf fields and the sorted string table
# ----------------------------------------------------------------------------------------------------


class _DecodeError(Exception):
    """Internal: malformed bytes; re-raised as TFCheckpointError with the file name."""


def read_varint(buf: bytes, pos: int) -> Tuple[int, int]:
    """Decode an unsigned LEB128 varint at ``buf[pos:]``; returns ``(value, position after it)``."""
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise _DecodeError("varint runs past the end of its buffer")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _DecodeError("varint longer than 10 bytes")


def iter_protobuf_fields(buf: bytes) -> Iterator[Tuple[int, int, Union[int, bytes]]]:
    """Yield ``(field_number, wire_type, value)`` for each field of a serialized protobuf message.

    Varints (wire type 0) and fixed32/fixed64 (5/1) come back as unsigned ints, length-delimited fields (2)
    as bytes. Groups (3/4) do not occur in the messages read here and are refused.
    """
    pos = 0
    while pos < len(buf):
        tag, pos = read_varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise _DecodeError(f"fixed64 field {field} truncated")
            (value,) = struct.unpack_from("<Q", buf, pos)
            pos += 8
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            if pos + length > len(buf):
                raise _DecodeError(f"field {field} length {length} runs past the end of its message")
            value = bytes(buf[pos : pos + length])
            pos += length
        elif wire == 5:
            if pos + 4 > len(buf):
                raise _DecodeError(f"fixed32 field {field} truncated")
            (value,) = struct.unpack_from("<I", buf, pos)
            pos += 4
        else:
            raise _DecodeError(f"unsupported protobuf wire type {wire} (field {field})")
        yield field, wire, value


def _signed64(value: int) -> int:
    """A protobuf int64 varint is the two's complement of a negative number (e.g. -1 for an unknown dim)."""
    return value - (1 << 64) if value >= (1 << 63) else value


_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_LEN = 48  # two block handles padded to 40 bytes, then the 8-byte magic
_BLOCK_TRAILER_LEN = 5  # compression type byte + masked crc32c


def _decode_block_handle(buf: bytes, pos: int) -> Tuple[Tuple[int, int], int]:
    offset, pos = read_varint(buf, pos)
    size, pos = read_varint(buf, pos)
    return (offset, size), pos


def iter_block_entries(block: bytes) -> Iterator[Tuple[bytes, bytes]]:
    """Yield ``(key, value)`` for every entry of one uncompressed table block (contents without trailer)."""
    if len(block) < 4:
        raise _DecodeError("block shorter than its restart count")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 - 4 * num_restarts  # entries stop where the restart array starts
    if end < 0:
        raise _DecodeError(f"block restart count {num_restarts} does not fit in {len(block)} bytes")
    pos = 0
    key = b""
    while pos < end:
        shared, pos = read_varint(block, pos)
        unshared, pos = read_varint(block, pos)
        value_len, pos = read_varint(block, pos)
        if shared > len(key) or pos + unshared + value_len > end:
            raise _DecodeError("block entry overruns its block")
        key = key[:shared] + bytes(block[pos : pos + unshared])
        pos += unshared
        yield key, bytes(block[pos : pos + value_len])
        pos += value_len


def _read_block(data: bytes, handle: Tuple[int, int], what: str) -> bytes:
    offset, size = handle
    if offset + size + _BLOCK_TRAILER_LEN > len(data):
        raise _DecodeError(f"{what} block [{offset}, {offset + size}) runs past the end of the file")
    contents = data[offset : offset + size]
    ctype = data[offset + size]
    (stored,) = struct.unpack_from("<I", data, offset + size + 1)
    actual = mask_crc32c(crc32c(data[offset : offset + size + 1]))
    if stored != actual:
        raise _DecodeError(f"{what} block at offset {offset}: crc32c mismatch (stored {stored:#010x}, computed {actual:#010x})")
    if ctype != 0:
        kind = "snappy" if ctype == 1 else f"type {ctype}"
        raise _DecodeError(f"{what} block at offset {offset} is {kind}-compressed; TensorFlow writes bundles uncompressed and this reader reads only those")
    return contents


def read_sstable(data: bytes) -> List[Tuple[bytes, bytes]]:
    """All ``(key, value)`` entries of a LevelDB-style table held in ``data``, in file order."""
    if len(data) < _FOOTER_LEN:
        raise _DecodeError(f"{len(data)} bytes is shorter than the {_FOOTER_LEN}-byte table footer")
    footer = data[-_FOOTER_LEN:]
    (magic,) = struct.unpack_from("<Q", footer, _FOOTER_LEN - 8)
    if magic != _TABLE_MAGIC:
        raise _DecodeError(f"bad table magic {magic:#018x} (not a checkpoint index, or truncated)")
    _metaindex, pos = _decode_block_handle(footer, 0)
    index_handle, _ = _decode_block_handle(footer, pos)
    entries = []
    for _separator, handle_bytes in iter_block_entries(_read_block(data, index_handle, "index")):
        handle, _ = _decode_block_handle(handle_bytes, 0)
        entries.extend(iter_block_entries(_read_block(data, handle, "data")))
    return entries


# ----------------------------------------------------------------------------------------------------
# the bundle
# ----------------------------------------------------------------------------------------------------

# TensorFlow DataType enum value -> (name, numpy dtype of the stored bytes)
_DTYPES: Dict[int, Tuple[str, str]] = {
    1: ("float32", "<f4"),
    2: ("float64", "<f8"),
    3: ("int32", "<i4"),
    4: ("uint8", "u1"),
    5: ("int16", "<i2"),
    6: ("int8", "i1"),
    8: ("complex64", "<c8"),
    9: ("int64", "<i8"),
    10: ("bool", "?"),
    14: ("bfloat16", "<u2"),  # upcast to float32 on read
    17: ("uint16", "<u2"),
    18: ("complex128", "<c16"),
    19: ("float16", "<f2"),
    22: ("uint32", "<u4"),
    23: ("uint64", "<u8"),
}
_UNSUPPORTED_DTYPES = {7: "string", 20: "resource", 21: "variant"}
_STORED_DTYPE = {name: np.dtype(stored) for name, stored in _DTYPES.values()}


@dataclass(frozen=True)
class TFVariable:
    """One variable's index entry: where its bytes are and what they hold."""

    name: str
    dtype: str  # TensorFlow dtype name, e.g. "float32", "bfloat16"
    shape: Tuple[int, ...]
    shard_id: int
    offset: int
    size: int  # bytes
    crc32c: Optional[int]  # masked, as stored; None if the entry has none


def resolve_checkpoint_prefix(path: PathLike) -> str:
    """The checkpoint prefix for ``path``: a prefix (``dir/model.ckpt``), its ``.index`` file, or a directory.

    A directory's ``checkpoint`` file (``model_checkpoint_path: "..."``) names the prefix; without one, the
    directory must hold exactly one ``*.index`` file.
    """
    p = Path(path)
    if p.name.endswith(".index") and p.is_file():
        return str(p)[: -len(".index")]
    if not p.is_dir():
        return str(p)
    state = p / "checkpoint"
    if state.is_file():
        m = re.search(r'^model_checkpoint_path:\s*"(.*)"\s*$', state.read_text(encoding="utf-8"), re.M)
        if m:
            named = Path(m.group(1))
            return str(named if named.is_absolute() else p / named)
    indexes = sorted(p.glob("*.index"))
    if len(indexes) != 1:
        found = ", ".join(i.name for i in indexes) or "none"
        raise TFCheckpointError(f"{p}: expected exactly one TensorFlow checkpoint (*.index) in the directory, found {found}")
    return str(indexes[0])[: -len(".index")]


def _parse_entry(index_path: str, name: str, value: bytes) -> TFVariable:
    dtype_enum, shape, shard_id, offset, size, crc, sliced = 0, [], 0, 0, 0, None, False
    for field, _wire, v in iter_protobuf_fields(value):
        if field == 1:
            dtype_enum = v
        elif field == 2:
            for sfield, _w, sv in iter_protobuf_fields(v):
                if sfield == 2:  # Dim
                    size_of_dim = 0
                    for dfield, _dw, dv in iter_protobuf_fields(sv):
                        if dfield == 1:
                            size_of_dim = _signed64(dv)
                    shape.append(size_of_dim)
                elif sfield == 3 and sv:
                    raise TFCheckpointError(f"{index_path}: variable {name!r}: shape of unknown rank")
        elif field == 3:
            shard_id = v
        elif field == 4:
            offset = _signed64(v)
        elif field == 5:
            size = _signed64(v)
        elif field == 6:
            crc = v
        elif field == 7:
            sliced = True
    if sliced:
        raise TFCheckpointError(f"{index_path}: variable {name!r} is partitioned (saved as slices); this reader reads whole variables only")
    if dtype_enum in _UNSUPPORTED_DTYPES:
        raise TFCheckpointError(f"{index_path}: variable {name!r}: unsupported dtype {_UNSUPPORTED_DTYPES[dtype_enum]} (DataType {dtype_enum})")
    if dtype_enum not in _DTYPES:
        raise TFCheckpointError(f"{index_path}: variable {name!r}: unknown or unsupported DataType enum {dtype_enum}")
    if any(d < 0 for d in shape):
        raise TFCheckpointError(f"{index_path}: variable {name!r}: shape {shape} has an unknown dimension")
    dtype_name, np_dtype = _DTYPES[dtype_enum]
    expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(np_dtype).itemsize
    if size != expected:
        raise TFCheckpointError(
            f"{index_path}: variable {name!r}: {dtype_name} of shape {list(shape)} needs {expected} bytes but the entry says {size}"
        )
    return TFVariable(name, dtype_name, tuple(shape), shard_id, offset, size, crc)


class TFCheckpointReader:
    """Reads the index of a TensorFlow checkpoint once; ``read(name)`` then reads one variable's tensor.

    Args:
        prefix: checkpoint prefix, ``.index`` file or directory (see :func:`resolve_checkpoint_prefix`).
        verify_crc: check every tensor's CRC-32C against its index entry (default True).

    Raises:
        TFCheckpointError: missing or corrupted index, unsupported dtype, entry size not matching its shape.
    """

    def __init__(self, prefix: PathLike, verify_crc: bool = True):
        self.prefix = resolve_checkpoint_prefix(prefix)
        self.index_path = self.prefix + ".index"
        self.verify_crc = verify_crc
        if not os.path.isfile(self.index_path):
            raise TFCheckpointError(f"{self.index_path}: TensorFlow checkpoint index not found (expected PREFIX.index next to PREFIX.data-*)")
        with open(self.index_path, "rb") as f:
            data = f.read()
        try:
            entries = read_sstable(data)
        except _DecodeError as e:
            raise TFCheckpointError(f"{self.index_path}: corrupt checkpoint index: {e}") from None
        self.num_shards = 1
        self.variables: Dict[str, TFVariable] = {}
        for key, value in entries:
            try:
                if key == b"":
                    for field, _w, v in iter_protobuf_fields(value):
                        if field == 1:
                            self.num_shards = v
                        elif field == 2 and v != 0:
                            raise TFCheckpointError(f"{self.index_path}: big-endian checkpoint; only little-endian is read")
                    continue
                name = key.decode("utf-8")
                self.variables[name] = _parse_entry(self.index_path, name, value)
            except (_DecodeError, UnicodeDecodeError) as e:
                raise TFCheckpointError(f"{self.index_path}: corrupt entry {key!r}: {e}") from None
        for var in self.variables.values():
            if not 0 <= var.shard_id < self.num_shards:
                raise TFCheckpointError(f"{self.index_path}: variable {var.name!r}: shard {var.shard_id} but the header says {self.num_shards} shards")

    def data_path(self, shard_id: int) -> str:
        """File name of data shard ``shard_id``: ``PREFIX.data-00000-of-00001``."""
        return f"{self.prefix}.data-{shard_id:05d}-of-{self.num_shards:05d}"

    def read(self, name: str) -> np.ndarray:
        """The tensor of variable ``name`` as a numpy array (bfloat16 upcast to float32).

        Raises:
            TFCheckpointError: unknown name, missing or truncated data shard, CRC mismatch.
        """
        var = self.variables.get(name)
        if var is None:
            raise TFCheckpointError(f"{self.index_path}: no variable named {name!r}")
        path = self.data_path(var.shard_id)
        try:
            with open(path, "rb") as f:
                f.seek(var.offset)
                raw = f.read(var.size)
                file_size = os.fstat(f.fileno()).st_size
        except FileNotFoundError:
            raise TFCheckpointError(f"{path}: data shard not found (needed for variable {name!r})") from None
        if len(raw) != var.size:
            raise TFCheckpointError(
                f"{path}: truncated: variable {name!r} needs bytes [{var.offset}, {var.offset + var.size}) but the file has {file_size} bytes"
            )
        if self.verify_crc and var.crc32c is not None:
            actual = mask_crc32c(crc32c(raw))
            if actual != var.crc32c:
                raise TFCheckpointError(
                    f"{path}: variable {name!r}: crc32c mismatch (index says {var.crc32c:#010x}, data gives {actual:#010x}): corrupted data"
                )
        array = np.frombuffer(raw, dtype=_STORED_DTYPE[var.dtype]).reshape(var.shape)
        if var.dtype == "bfloat16":
            # bfloat16 is the upper 16 bits of a float32: shifting them back up is exact.
            array = (array.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return array.copy()  # writable and independent of the read buffer

    def read_all(self) -> Dict[str, np.ndarray]:
        """Every variable, by name, in sorted-name order."""
        return {name: self.read(name) for name in sorted(self.variables)}


def list_variables(prefix: PathLike) -> Dict[str, Tuple[str, Tuple[int, ...]]]:
    """``{name: (dtype_name, shape)}`` from the checkpoint index alone (no tensor data is read)."""
    reader = TFCheckpointReader(prefix)
    return {name: (v.dtype, v.shape) for name, v in sorted(reader.variables.items())}


def read_tf_checkpoint(prefix: PathLike, verify_crc: bool = True) -> Dict[str, np.ndarray]:
    """Every variable of the checkpoint as ``{name: numpy array}`` (bfloat16 upcast to float32)."""
    return TFCheckpointReader(prefix, verify_crc=verify_crc).read_all()
