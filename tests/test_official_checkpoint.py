"""The TensorFlow-free checkpoint reader (etc_fairseq/official/tf_checkpoint.py) and the official variable list.

Two kinds of evidence: checkpoints TensorFlow itself wrote (tests/fixtures/official/, made by the official
ETC code; their index carries TensorFlow's CRCs and the npz TensorFlow's values), and small bundles built
here byte by byte (prefix-compressed keys, several blocks, two shards, every supported dtype), so the
table decoding is checked on inputs whose every byte is known.
"""

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from etc_fairseq.checkpoint_io import CheckpointLoadError
from etc_fairseq.official.tf_checkpoint import (
    TFCheckpointError,
    TFCheckpointReader,
    crc32c,
    list_variables,
    mask_crc32c,
    read_tf_checkpoint,
    read_varint,
    resolve_checkpoint_prefix,
)
from etc_fairseq.official.variables import official_variable_shapes, official_variables

FIXTURES = Path(__file__).parent / "fixtures" / "official"
FIXTURE_NAMES = ["shared", "separate", "kv_shared_preln"]


# ---------------------------------------------------------------------------------------------------
# a tiny writer of the format, independent of the reader (except for the CRC, tested on its own)
# ---------------------------------------------------------------------------------------------------


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_varint(field, value):
    return _varint(field << 3) + _varint(value & ((1 << 64) - 1))


def _field_bytes(field, payload):
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _entry(dtype_enum, shape, shard, offset, size, crc=None):
    shape_proto = b"".join(_field_bytes(2, _field_varint(1, dim)) for dim in shape)
    msg = _field_varint(1, dtype_enum) + _field_bytes(2, shape_proto)
    if shard:
        msg += _field_varint(3, shard)
    msg += _field_varint(4, offset) + _field_varint(5, size)
    if crc is not None:
        msg += _varint(6 << 3 | 5) + struct.pack("<I", crc)
    return msg


def _block(entries, restart_interval=2):
    body, restarts, prev = bytearray(), [], b""
    for i, (key, value) in enumerate(entries):
        if i % restart_interval == 0:
            restarts.append(len(body))
            shared = 0
        else:
            shared = 0
            while shared < min(len(prev), len(key)) and prev[shared] == key[shared]:
                shared += 1
        body += _varint(shared) + _varint(len(key) - shared) + _varint(len(value)) + key[shared:] + value
        prev = key
    restarts = restarts or [0]
    return bytes(body) + b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))


def _sstable(entries, per_block=3, compression=0):
    out = bytearray()

    def put(contents):
        offset = len(out)
        out.extend(contents + bytes([compression]))
        out.extend(struct.pack("<I", mask_crc32c(crc32c(contents + bytes([compression])))))
        return _varint(offset) + _varint(len(contents))

    index = []
    for start in range(0, len(entries), per_block):
        chunk = entries[start : start + per_block]
        index.append((chunk[-1][0], put(_block(chunk))))
    metaindex = put(_block([]))
    index_handle = put(_block(index, restart_interval=1))
    footer = (metaindex + index_handle).ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57)
    return bytes(out) + footer


_ENUM = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "int64": 9, "bool": 10,
         "uint16": 17, "float16": 19, "uint32": 22, "uint64": 23, "complex64": 8}


def _write_bundle(prefix, tensors, num_shards=1, extra_entries=()):
    """Write ``{name: (dtype_enum, shape, raw bytes)}`` as a TensorFlow bundle; name order decides shards."""
    shards = [bytearray() for _ in range(num_shards)]
    entries = [(b"", _field_varint(1, num_shards))]
    for i, (name, (enum, shape, raw)) in enumerate(sorted(tensors.items())):
        shard = i % num_shards
        entries.append((name.encode(), _entry(enum, shape, shard, len(shards[shard]), len(raw), mask_crc32c(crc32c(raw)))))
        shards[shard] += raw
    entries = sorted(entries + list(extra_entries))
    Path(str(prefix) + ".index").write_bytes(_sstable(entries))
    for s, data in enumerate(shards):
        Path(f"{prefix}.data-{s:05d}-of-{num_shards:05d}").write_bytes(bytes(data))


def _one_line(err):
    message = str(err.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------------
# CRC-32C and varints
# ---------------------------------------------------------------------------------------------------


def _bytewise_crc32c(data):
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def test_crc32c_known_answers():
    # RFC 3720 (iSCSI) test vectors and the classic check value
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(b"") == 0


@pytest.mark.parametrize("size", [65535, 65536, 3 * 65536 + 7, (1 << 20) + 5])
def test_crc32c_chunked_path_equals_bytewise(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    assert crc32c(data) == _bytewise_crc32c(data)


def test_mask_crc32c_rotates_and_offsets():
    assert mask_crc32c(0) == 0xA282EAD8
    assert mask_crc32c(1 << 15) == 0xA282EAD8 + 1
    assert mask_crc32c(1) == (1 << 17) + 0xA282EAD8


def test_read_varint():
    assert read_varint(b"\x00", 0) == (0, 1)
    assert read_varint(b"\xac\x02", 0) == (300, 2)
    assert read_varint(b"xx\xff\xff\xff\xff\x0f", 2) == (0xFFFFFFFF, 7)
    assert read_varint(_varint(2**64 - 1), 0) == (2**64 - 1, 10)


# ---------------------------------------------------------------------------------------------------
# hand-built bundles
# ---------------------------------------------------------------------------------------------------


def test_hand_built_bundle_every_dtype_two_shards(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "model/layer_0/kernel": rng.normal(size=(3, 5)).astype(np.float32),
        "model/layer_0/bias": rng.normal(size=(5,)).astype(np.float64),
        "model/layer_1/kernel": rng.normal(size=(2, 2, 3)).astype(np.float16),
        "model/layer_1/ids": rng.integers(-5, 5, (4,)).astype(np.int32),
        "model/steps": np.array(123456789012, dtype=np.int64),
        "model/flags": np.array([True, False, True]),
        "model/bytes": rng.integers(0, 255, (7,)).astype(np.uint8),
        "model/small": rng.integers(-100, 100, (2, 3)).astype(np.int8),
        "model/short": rng.integers(-100, 100, (3,)).astype(np.int16),
        "model/ushort": rng.integers(0, 60000, (3,)).astype(np.uint16),
        "model/uint": np.array([1, 2**32 - 1], dtype=np.uint32),
        "model/ulong": np.array([2**64 - 1], dtype=np.uint64),
        "model/complex": (rng.normal(size=(2,)) + 1j * rng.normal(size=(2,))).astype(np.complex64),
        "model/empty": np.zeros((0, 3), np.float32),
    }
    tensors = {name: (_ENUM[str(a.dtype)], a.shape, a.tobytes()) for name, a in arrays.items()}
    bf16 = np.array([[1.5, -2.0], [0.15625, 2.0**100]], np.float32)  # exactly representable in bfloat16
    tensors["model/bf16"] = (14, (2, 2), (bf16.view(np.uint32) >> 16).astype("<u2").tobytes())
    prefix = tmp_path / "model.ckpt"
    _write_bundle(prefix, tensors, num_shards=2)

    listed = list_variables(prefix)
    assert listed["model/bf16"] == ("bfloat16", (2, 2))
    assert listed["model/layer_1/kernel"] == ("float16", (2, 2, 3))
    assert listed["model/steps"] == ("int64", ())
    assert set(listed) == set(arrays) | {"model/bf16"}

    values = read_tf_checkpoint(prefix)
    for name, a in arrays.items():
        assert values[name].dtype == a.dtype and values[name].shape == a.shape
        np.testing.assert_array_equal(values[name], a)
    assert values["model/bf16"].dtype == np.float32
    np.testing.assert_array_equal(values["model/bf16"], bf16)
    assert TFCheckpointReader(prefix).num_shards == 2


def test_hand_built_bundle_entry_size_not_matching_shape(tmp_path):
    prefix = tmp_path / "model.ckpt"
    _write_bundle(prefix, {"w": (1, (2, 3), bytes(20))})  # float32 [2, 3] needs 24 bytes
    with pytest.raises(TFCheckpointError) as err:
        list_variables(prefix)
    assert _one_line(err).startswith(f"{prefix}.index: variable 'w': float32 of shape [2, 3] needs 24 bytes")


def test_hand_built_bundle_unsupported_dtype(tmp_path):
    prefix = tmp_path / "model.ckpt"
    _write_bundle(prefix, {"vocab": (7, (2,), bytes(8))})  # DT_STRING
    with pytest.raises(TFCheckpointError) as err:
        read_tf_checkpoint(prefix)
    assert _one_line(err) == f"{prefix}.index: variable 'vocab': unsupported dtype string (DataType 7)"


def test_hand_built_bundle_partitioned_variable_refused(tmp_path):
    prefix = tmp_path / "model.ckpt"
    sliced = _entry(1, (4,), 0, 0, 16) + _field_bytes(7, b"")
    Path(f"{prefix}.index").write_bytes(_sstable([(b"", _field_varint(1, 1)), (b"emb", sliced)]))
    with pytest.raises(TFCheckpointError, match=r"variable 'emb' is partitioned"):
        list_variables(prefix)


def test_snappy_compressed_block_refused(tmp_path):
    prefix = tmp_path / "model.ckpt"
    Path(f"{prefix}.index").write_bytes(_sstable([(b"", _field_varint(1, 1))], compression=1))
    with pytest.raises(TFCheckpointError) as err:
        list_variables(prefix)
    assert "snappy-compressed" in _one_line(err) and str(prefix) + ".index" in str(err.value)


def test_not_an_index_file(tmp_path):
    prefix = tmp_path / "model.ckpt"
    Path(f"{prefix}.index").write_bytes(b"this is not a table, just some text that is long enough" * 2)
    with pytest.raises(TFCheckpointError, match=r"model\.ckpt\.index: corrupt checkpoint index: bad table magic"):
        list_variables(prefix)


# ---------------------------------------------------------------------------------------------------
# checkpoints written by TensorFlow (the official ETC fixtures)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_variables_are_those_the_config_implies(name):
    config = json.loads((FIXTURES / name / "etc_config.json").read_text())
    listed = list_variables(FIXTURES / name)  # a directory holding one checkpoint
    assert {k: shape for k, (_dtype, shape) in listed.items()} == official_variable_shapes(config)
    assert {dtype for dtype, _shape in listed.values()} == {"float32"}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_values_equal_what_tensorflow_held(name):
    values = read_tf_checkpoint(FIXTURES / name / "model.ckpt")  # every tensor's CRC checked against TF's
    dumped = np.load(FIXTURES / name / "official_io.npz")
    keys = [k for k in dumped.files if k.startswith("var/")]
    assert len(keys) > 20
    assert any(dumped[k].ndim == 2 and dumped[k].shape[0] != dumped[k].shape[1] for k in keys)  # orientation
    for key in keys:
        np.testing.assert_array_equal(values[key[len("var/") :]], dumped[key], err_msg=key)


def test_variable_docs_cover_sharing_modes():
    config = json.loads((FIXTURES / "shared" / "etc_config.json").read_text())
    shared = official_variables(config)
    q = "etc_document_bert/global_local_transformer_layers/fused_att_layer_1/fused_global_local_att/long_query_projection/linear/kernel"
    assert shared[q].shape == (32, 32) and "all pieces" in shared[q].meaning
    assert not any("g2l_key" in n or "global_query" in n for n in shared)
    separate = official_variables(dict(config, share_qkv_projections=False, share_feed_forward_params=False, embedding_size=16))
    assert sum("_key_projection/linear/kernel" in n for n in separate) == 4 * config["num_hidden_layers"]
    assert "etc_document_bert/token_emb_lookup/projection/kernel" in separate
    with pytest.raises(ValueError, match="vocab_size"):
        official_variables({"hidden_size": 32})


def _copy_fixture(tmp_path, name="shared"):
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


def test_missing_index(tmp_path):
    target = _copy_fixture(tmp_path)
    (target / "model.ckpt.index").unlink()
    with pytest.raises(CheckpointLoadError) as err:  # the project's one checkpoint error class
        read_tf_checkpoint(target / "model.ckpt")
    assert _one_line(err).startswith(f"{target / 'model.ckpt.index'}: TensorFlow checkpoint index not found")
    with pytest.raises(TFCheckpointError, match=r"expected exactly one TensorFlow checkpoint \(\*\.index\).*found none"):
        read_tf_checkpoint(target)


def test_truncated_data_shard(tmp_path):
    target = _copy_fixture(tmp_path)
    data = target / "model.ckpt.data-00000-of-00001"
    full = data.read_bytes()
    data.write_bytes(full[: len(full) // 2])
    reader = TFCheckpointReader(target)
    last = max(reader.variables.values(), key=lambda v: v.offset)
    with pytest.raises(TFCheckpointError) as err:
        reader.read_all()
    message = _one_line(err)
    assert message.startswith(f"{data}: truncated: variable '")
    assert f"but the file has {len(full) // 2} bytes" in message
    with pytest.raises(TFCheckpointError, match=f"variable '{last.name}' needs bytes"):
        reader.read(last.name)


def test_missing_data_shard(tmp_path):
    target = _copy_fixture(tmp_path)
    (target / "model.ckpt.data-00000-of-00001").unlink()
    with pytest.raises(TFCheckpointError, match=r"model\.ckpt\.data-00000-of-00001: data shard not found \(needed for variable 'etc_document_bert/"):
        read_tf_checkpoint(target)


def test_corrupted_data_byte_fails_the_crc(tmp_path):
    target = _copy_fixture(tmp_path)
    reader = TFCheckpointReader(target)
    victim = reader.variables["etc_document_bert/segment_emb_lookup/embedding_table"]
    data = target / "model.ckpt.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[victim.offset + 5] ^= 0x40
    data.write_bytes(bytes(raw))
    with pytest.raises(TFCheckpointError) as err:
        reader.read(victim.name)
    assert _one_line(err).startswith(f"{data}: variable '{victim.name}': crc32c mismatch")
    # without verification the (wrong) bytes come back: the CRC is what caught it
    assert not np.array_equal(TFCheckpointReader(target, verify_crc=False).read(victim.name), read_tf_checkpoint(FIXTURES / "shared")[victim.name])


def test_corrupted_index_entry(tmp_path):
    target = _copy_fixture(tmp_path)
    index = target / "model.ckpt.index"
    raw = bytearray(index.read_bytes())
    at = raw.index(b"segment_emb_lookup")
    raw[at + 3] ^= 0x01  # inside a variable name in the first data block
    index.write_bytes(bytes(raw))
    with pytest.raises(TFCheckpointError) as err:
        list_variables(target)
    assert _one_line(err).startswith(f"{index}: corrupt checkpoint index: data block at offset 0: crc32c mismatch")


def test_truncated_index(tmp_path):
    target = _copy_fixture(tmp_path)
    index = target / "model.ckpt.index"
    index.write_bytes(index.read_bytes()[:-10])
    with pytest.raises(TFCheckpointError, match=r"model\.ckpt\.index: corrupt checkpoint index: bad table magic"):
        list_variables(target)


def test_resolve_checkpoint_prefix(tmp_path):
    target = _copy_fixture(tmp_path)
    prefix = str(target / "model.ckpt")
    assert resolve_checkpoint_prefix(target) == prefix
    assert resolve_checkpoint_prefix(prefix + ".index") == prefix
    assert resolve_checkpoint_prefix(prefix) == prefix
    # a TensorFlow `checkpoint` state file names the prefix (relative to the directory)
    for suffix in (".index", ".data-00000-of-00001"):
        (target / ("model.ckpt" + suffix)).rename(target / ("model.ckpt-7" + suffix))
    (target / "model.ckpt-3.index").write_bytes(b"")
    (target / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-7"\nall_model_checkpoint_paths: "model.ckpt-7"\n')
    assert resolve_checkpoint_prefix(target) == str(target / "model.ckpt-7")
    assert len(list_variables(target)) == 54


# ---------------------------------------------------------------------------------------------------
# an official checkpoint directory checked against its etc_config.json
# ---------------------------------------------------------------------------------------------------

from etc_fairseq.official.checkpoint import load_official_config, read_official_checkpoint  # noqa: E402


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_read_official_checkpoint_fixture(name):
    ckpt = read_official_checkpoint(FIXTURES / name)
    raw_config = json.loads((FIXTURES / name / "etc_config.json").read_text())
    assert ckpt.config == raw_config  # the generator wrote every field
    assert set(ckpt.weights) == set(official_variable_shapes(raw_config)) and not ckpt.skipped
    dumped = np.load(FIXTURES / name / "official_io.npz")
    key = "var/etc_document_bert/segment_emb_lookup/embedding_table"
    np.testing.assert_array_equal(ckpt.weights[key[4:]], dumped[key])


def _fixture_with_config(tmp_path, name, **changes):
    target = _copy_fixture(tmp_path, name)
    config = json.loads((target / "etc_config.json").read_text())
    config.update(changes)
    (target / "etc_config.json").write_text(json.dumps(config))
    return target


def test_official_config_defaults_and_errors(tmp_path):
    target = tmp_path
    (target / "etc_config.json").write_text(json.dumps({"vocab_size": 128, "hidden_size": 32, "future_field": 1}))
    config = load_official_config(target / "etc_config.json")
    assert config["share_qkv_projections"] is True and config["local_radius"] == 84 and "future_field" not in config
    (target / "etc_config.json").write_text(json.dumps({"hidden_size": 32}))
    with pytest.raises(TFCheckpointError, match=r"etc_config\.json: official ETC config: vocab_size is required"):
        load_official_config(target / "etc_config.json")
    (target / "etc_config.json").write_text('{"vocab_size": 128,')
    with pytest.raises(TFCheckpointError, match=r"etc_config\.json: not valid JSON: .*line 1"):
        load_official_config(target / "etc_config.json")
    (target / "etc_config.json").write_text(json.dumps({"vocab_size": 128, "relative_pos_max_distance": 3, "relative_vocab_size": 9}))
    with pytest.raises(TFCheckpointError) as err:
        load_official_config(target / "etc_config.json")
    assert _one_line(err).endswith("relative_vocab_size 9 is too small for relative_pos_max_distance 3 (needs at least 10)")
    (target / "etc_config.json").write_text(json.dumps({"vocab_size": "128"}))
    with pytest.raises(TFCheckpointError, match=r"field 'vocab_size' must be a non-negative integer, got '128'"):
        load_official_config(target / "etc_config.json")


def test_official_checkpoint_missing_config(tmp_path):
    target = _copy_fixture(tmp_path)
    (target / "etc_config.json").unlink()
    with pytest.raises(TFCheckpointError) as err:
        read_official_checkpoint(target)
    assert _one_line(err).startswith(f"{target / 'etc_config.json'}: not found")


def test_official_checkpoint_shape_mismatch(tmp_path):
    target = _fixture_with_config(tmp_path, "shared", intermediate_size=48)
    with pytest.raises(TFCheckpointError) as err:
        read_official_checkpoint(target)
    message = _one_line(err)
    assert message.startswith(f"{target / 'model.ckpt.index'}: variable 'etc_document_bert/global_local_transformer_layers/feed_forward_layer_0/dense_layers/layer_0/")
    assert "has shape [" in message and f"but {target / 'etc_config.json'} implies" in message


def test_official_checkpoint_unknown_variable(tmp_path):
    # separate projections in the checkpoint, but the config claims the official default sharing
    target = _fixture_with_config(tmp_path, "separate", share_qkv_projections=True)
    with pytest.raises(TFCheckpointError) as err:
        read_official_checkpoint(target)
    assert _one_line(err).startswith(f"{target / 'model.ckpt.index'}: variable 'etc_document_bert/global_local_transformer_layers/fused_att_layer_0/fused_global_local_att/g2g_key_projection/linear/bias' [32] is not part of an official EtcModel")


def test_official_checkpoint_missing_variable(tmp_path):
    target = _fixture_with_config(tmp_path, "shared", max_absolute_position_embeddings=64)
    with pytest.raises(TFCheckpointError) as err:
        read_official_checkpoint(target)
    assert _one_line(err) == (
        f"{target / 'model.ckpt.index'}: variable 'position_emb_lookup_global/embedding_table' missing: "
        f"{target / 'etc_config.json'} implies global absolute position embeddings of shape [64, 32] (and 1 more)"
    )


def test_official_checkpoint_leaves_out_training_only_variables(tmp_path):
    values = read_tf_checkpoint(FIXTURES / "shared")
    tensors = {n: (1, a.shape, a.tobytes()) for n, a in values.items()}
    slot = "etc_document_bert/segment_emb_lookup/embedding_table/adam_m"
    tensors[slot] = (1, (16, 32), np.ones((16, 32), np.float32).tobytes())
    tensors["global_step"] = (9, (), np.array(1000, np.int64).tobytes())
    target = tmp_path / "with_slots"
    target.mkdir()
    shutil.copy(FIXTURES / "shared" / "etc_config.json", target)
    _write_bundle(target / "model.ckpt", tensors)
    ckpt = read_official_checkpoint(target)
    assert ckpt.skipped == ["etc_document_bert/segment_emb_lookup/embedding_table/adam_m", "global_step"]
    assert set(ckpt.weights) == set(values)


def test_variables_outside_the_model_refused_or_dropped_by_name(tmp_path, capsys):
    """A released pretraining checkpoint may hold heads next to the model (names unknown: the official release
    has no pretraining code). Refused by name, with the way out; ``--drop-unknown`` leaves them out, naming
    each, and the model still computes the official outputs. Unknown names inside the model's own scope stay
    refused. (The head variables here are CONSTRUCTED, added to the TensorFlow-written fixture.)"""
    import torch

    from etc_fairseq.cli.lift import main as lift_main
    from etc_fairseq.official import OFFICIAL_INPUT_NAMES, convert_official_checkpoint, forward_official_inputs

    values = read_tf_checkpoint(FIXTURES / "shared")
    tensors = {n: (1, a.shape, a.tobytes()) for n, a in values.items()}
    heads = ["cls/predictions/output_bias", "cls/predictions/transform/dense/kernel"]
    tensors[heads[0]] = (1, (128,), np.ones(128, np.float32).tobytes())
    tensors[heads[1]] = (1, (32, 32), np.ones((32, 32), np.float32).tobytes())
    target = tmp_path / "with_heads"
    target.mkdir()
    for name in ("etc_config.json", "vocab_bert_uncased_english.txt"):
        shutil.copy(FIXTURES / "shared" / name, target)
    _write_bundle(target / "model.ckpt", tensors)

    with pytest.raises(TFCheckpointError) as err:
        read_official_checkpoint(target)
    message = _one_line(err)
    assert message.startswith(f"{target / 'model.ckpt.index'}: variable 'cls/predictions/output_bias' [128] is not part")
    assert "(and 1 more)" in message and "--drop-unknown leaves such variables out" in message
    ckpt = read_official_checkpoint(target, drop_unknown=True)
    assert ckpt.dropped == heads and set(ckpt.weights) == set(values)

    conv = convert_official_checkpoint(target, drop_unknown=True)
    z = np.load(FIXTURES / "shared" / "official_io.npz")
    with torch.no_grad():
        long_out, global_out = forward_official_inputs(conv.encoder, {k: z[k] for k in OFFICIAL_INPUT_NAMES if k in z.files})
    np.testing.assert_allclose(long_out.numpy(), z["long_output"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(global_out.numpy(), z["global_output"], atol=1e-5, rtol=0)

    out = tmp_path / "out" / "model.pt"
    assert lift_main([str(target), "--out", str(out)]) == 1
    assert "cls/predictions/output_bias" in capsys.readouterr().err and not out.parent.exists()
    assert lift_main([str(target), "--out", str(out), "--drop-unknown"]) == 0
    assert f"2 variables outside the model left out (--drop-unknown): {', '.join(heads)}" in capsys.readouterr().out

    inside = "etc_document_bert/some_new_layer/kernel"
    tensors[inside] = (1, (2,), np.ones(2, np.float32).tobytes())
    _write_bundle(target / "model.ckpt", tensors)
    with pytest.raises(TFCheckpointError) as err:
        read_official_checkpoint(target, drop_unknown=True)
    assert f"variable '{inside}' [2] is not part of an official EtcModel" in _one_line(err)
    assert "--drop-unknown" not in str(err.value)
