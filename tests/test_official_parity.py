"""Converted official ETC checkpoints compute what the official TensorFlow EtcModel computed.

The fixtures (tests/fixtures/official/, see its README) hold a TF checkpoint written by the official code, its
inputs under the official ``EtcModel.call`` keyword names and the official outputs; each is converted with
:func:`etc_fairseq.official.convert_official_checkpoint` and run with :func:`forward_official_inputs`."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from etc_fairseq.encoder import EtcEncoder
from etc_fairseq.official import (
    OFFICIAL_FIELD_HANDLING,
    OFFICIAL_INPUT_NAMES,
    convert_official_checkpoint,
    forward_official_inputs,
    official_to_encoder_config,
    official_weight_map,
)
from etc_fairseq.official.convert import OfficialConversionError
from etc_fairseq.official.variables import OFFICIAL_CONFIG_DEFAULTS, official_variables

FIXTURES = Path(__file__).parent / "fixtures" / "official"
NAMES = ("shared", "separate", "kv_shared_preln")


def _io(name):
    z = np.load(FIXTURES / name / "official_io.npz")
    return {k: z[k] for k in z.files}


def _features(io):
    return {k: io[k] for k in OFFICIAL_INPUT_NAMES if k in io}


@pytest.mark.parametrize("name", NAMES)
def test_converted_model_equals_official_outputs(name):
    conv = convert_official_checkpoint(FIXTURES / name)
    io = _io(name)
    with torch.no_grad():
        long_out, global_out = forward_official_inputs(conv.encoder, _features(io))
    assert long_out.shape == io["long_output"].shape and global_out.shape == io["global_output"].shape
    np.testing.assert_allclose(long_out.numpy(), io["long_output"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(global_out.numpy(), io["global_output"], atol=1e-5, rtol=0)
    # every official model variable was used exactly once
    assert conv.mapped == len(official_variables(conv.official_config))


def test_tensor_inputs_and_saved_encoder_give_the_same_outputs(tmp_path):
    conv = convert_official_checkpoint(FIXTURES / "separate")
    io = _io("separate")
    feats = {k: torch.as_tensor(v) for k, v in _features(io).items()}
    conv.encoder.save_pretrained(tmp_path / "enc")
    reloaded = EtcEncoder.from_pretrained(tmp_path / "enc")
    with torch.no_grad():
        long_out, global_out = forward_official_inputs(reloaded, feats)
    np.testing.assert_allclose(long_out.numpy(), io["long_output"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(global_out.numpy(), io["global_output"], atol=1e-5, rtol=0)


def test_explicit_position_ids():
    conv = convert_official_checkpoint(FIXTURES / "kv_shared_preln")
    io = _io("kv_shared_preln")
    feats = _features(io)
    b, n_long = feats["token_ids"].shape
    n_global = feats["global_token_ids"].shape[1]
    with torch.no_grad():
        default = forward_official_inputs(conv.encoder, feats)
        same = forward_official_inputs(conv.encoder, dict(feats, position_ids=np.tile(np.arange(n_long), (b, 1)),
                                                          global_position_ids=np.tile(np.arange(n_global), (b, 1))))
        shifted = forward_official_inputs(conv.encoder, dict(feats, position_ids=np.tile(np.arange(n_long) + 3, (b, 1))))
    torch.testing.assert_close(same[0], default[0], atol=1e-6, rtol=0)
    assert (shifted[0] - default[0]).abs().max() > 1e-3  # positions are really used
    # shifted long positions == a model whose long table is shifted by 3 rows, default positions
    enc = conv.encoder
    with torch.no_grad():
        table = enc.embed_long_index_positions.weight
        table[: table.shape[0] - 3] = table[3:].clone()
        moved = forward_official_inputs(enc, feats)
    torch.testing.assert_close(moved[0], shifted[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(moved[1], shifted[1], atol=1e-5, rtol=0)


def test_every_official_field_is_handled():
    assert set(OFFICIAL_FIELD_HANDLING) == set(OFFICIAL_CONFIG_DEFAULTS) | {"vocab_size"}


def test_config_mapping():
    official = json.loads((FIXTURES / "kv_shared_preln" / "etc_config.json").read_text())
    cfg = official_to_encoder_config(official)
    assert (cfg.encoder_embed_dim, cfg.encoder_layers, cfg.encoder_attention_heads, cfg.encoder_ffn_embed_dim) == (32, 2, 4, 64)
    assert cfg.activation_fn == "gelu_accurate" and cfg.layer_norm_eps == 1e-12 and cfg.relative_bias
    assert cfg.shared_kv_per_side and not cfg.shared_kv and not cfg.shared_q and cfg.shared_out_proj
    assert cfg.pre_layer_norm and cfg.hard_g2l and cfg.hard_l2g and cfg.index_position_embeddings == 64
    assert cfg.relative_structure_labels.split(",")[:3] == ["not_belongs", "belongs", "other_context"]
    assert cfg.relative_vocab_size == 2 * 2 + 1 + 5  # 8 official rows + parent/child


@pytest.mark.parametrize("field,value,words", [
    ("att_size_per_head", 5, "att_size_per_head"),
    ("hidden_act", "swish", "hidden_act"),
    ("not_a_field", 1, "not_a_field"),
    ("local_radius", 10 ** 9, r"local_radius=1000000000: expected at most 131072"),  # would need 16 GB at use
])
def test_config_refused_by_name(field, value, words):
    official = json.loads((FIXTURES / "shared" / "etc_config.json").read_text())
    official[field] = value
    with pytest.raises(OfficialConversionError, match=words):
        official_to_encoder_config(official, source="x/etc_config.json")


def test_weight_map_is_one_to_one():
    for name in NAMES:
        official = json.loads((FIXTURES / name / "etc_config.json").read_text())
        mapping = official_weight_map(official)
        theirs = [t for t, _ in mapping.values()]
        assert len(set(theirs)) == len(theirs)
        assert set(theirs) == set(official_variables(official))


def test_vocabulary_of_the_wrong_size_is_refused(tmp_path):
    d = tmp_path / "ckpt"
    shutil.copytree(FIXTURES / "shared", d)
    vocab = d / "vocab_bert_uncased_english.txt"
    vocab.write_text(vocab.read_text() + "extra\n")
    with pytest.raises(OfficialConversionError, match="vocab_bert_uncased_english.txt.*vocab_size"):
        convert_official_checkpoint(d)


@pytest.mark.parametrize("name", NAMES)
def test_every_model_etc_lift_makes_of_an_official_checkpoint_computes_the_official_outputs(name, tmp_path):
    """etc-lift orders the token rows by its fairseq dictionary (``<s> <pad> </s> <unk>`` first) and records the
    official id -> row map in etc_tokenizer.json: the fairseq checkpoint through the hub, the core directory
    (--encoder-dir) and the Hugging Face directory (--format hf) all take the official features as they are."""
    import etc_fairseq.hf  # noqa: F401  (registers the Auto classes)
    from transformers import AutoModel

    from etc_fairseq.cli.lift import main as lift_main
    from etc_fairseq.models import EtcModel

    src = FIXTURES / name
    assert lift_main([str(src), "--out", str(tmp_path / "fairseq" / "model.pt"), "--encoder-dir",
                      str(tmp_path / "core"), "-q"]) == 0
    assert lift_main([str(src), "--format", "hf", "--out", str(tmp_path / "hf"), "-q"]) == 0
    io = _io(name)
    feats = _features(io)
    models = {"hub": EtcModel.from_pretrained(tmp_path / "fairseq"),
              "core": EtcEncoder.from_pretrained(tmp_path / "core"),
              "hf": AutoModel.from_pretrained(tmp_path / "hf").eval()}
    with torch.no_grad():
        for what, model in models.items():
            long_out, global_out = forward_official_inputs(model, feats)
            np.testing.assert_allclose(long_out.numpy(), io["long_output"], atol=1e-5, rtol=0, err_msg=what)
            np.testing.assert_allclose(global_out.numpy(), io["global_output"], atol=1e-5, rtol=0, err_msg=what)
        # the map is what makes them equal: the official ids taken as rows give other outputs
        n = len(models["core"].source_token_rows)
        as_rows, _ = forward_official_inputs(models["core"], feats, token_rows=range(n))
        assert np.abs(as_rows.numpy() - io["long_output"]).max() > 1e-2
