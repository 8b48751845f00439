"""Lifting RoBERTa into ETC (``etc_fairseq.lift``, ``etc-lift``), on a real fairseq RoBERTa checkpoint
trained on real Wikipedia text.

What is proven:

- exactness: with absolute positions, zeroed relative-label vectors, a local radius covering the input
  and an empty global input, the lifted ETC model's long features and LM logits equal fairseq's own
  RobertaModel's (eval mode, padded batch of real validation text), for every sharing configuration;
  and every ETC copy of every projection holds RoBERTa's weights;
- 2019 key names (``decoder.*``, ``emb_layer_norm``, packed ``in_proj``, argparse ``args``, numpy
  scalars, legacy serialization) lift to identical tensors;
- refusals: each size mismatch (naming both values), dictionary mismatch, unsafe pickles (not executed);
- ``etc-lift`` end to end, and ``fairseq-train --finetune-from-model`` starting from its output with a
  first loss far below a from-scratch run's.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from etc_fairseq.checkpoint_io import CheckpointLoadError, checkpoint_allowlist, load_checkpoint
from etc_fairseq.cli.lift import main as lift_main
from etc_fairseq.lift import (
    LiftError,
    check_dictionary,
    lift_roberta_into_etc,
    load_roberta_state,
    masked_lm_dictionary,
    normalise_roberta_state,
)
from etc_fairseq.models import config_for_arch
from etc_fairseq.models.lifting import build_etc_model
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "user_dir")

# The RoBERTa trained below: roberta_base with these sizes. etc_tiny has the same except the FFN (256).
ROBERTA_SIZE = dict(encoder_layers=2, encoder_embed_dim=64, encoder_ffn_embed_dim=128, encoder_attention_heads=4)
ETC_OVERRIDES = dict(encoder_ffn_embed_dim=128, max_positions=256)
ETC_FLAGS = ["--arch", "etc_tiny", "--encoder-ffn-embed-dim", "128", "--max-positions", "256"]

FAIRSEQ_COMMON = [
    "--task", "masked_lm", "--criterion", "masked_lm", "--tokens-per-sample", "256",
    "--sample-break-mode", "complete", "--batch-size", "8", "--optimizer", "adam",
    "--lr-scheduler", "fixed", "--cpu", "--seed", "1", "--num-workers", "0", "--log-format", "simple",
    "--log-interval", "1", "--disable-validation", "--no-epoch-checkpoints",
]


def lift(state, rcfg, cfg, dictionary, **kwargs):
    """What etc-lift does with a fairseq RoBERTa: the dictionary checked, a fresh ETC model built from it, the
    RoBERTa tensors lifted into its state."""
    fresh = build_etc_model(cfg, check_dictionary(state, dictionary), seed=1).state_dict()
    return lift_roberta_into_etc(state, rcfg, cfg, fresh, **kwargs)


def fairseq_cmd(module, *args):
    """``python -m module args``, as :func:`run` and ``run_python`` take it (no interpreter in front)."""
    return ["-m", module, *args]


def run(cmd, timeout=300):
    """Run ``cmd``: a :func:`fairseq_cmd` as a fork of a warm interpreter, an executable as a subprocess."""
    if cmd[0] == "-m":
        proc = run_python(cmd, cwd=REPO, timeout=timeout)
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{cmd[:4]} failed:\n{out[-4000:]}"
    return out


def first_loss(log: str) -> float:
    m = re.search(r"train_inner \| .*?loss=([\d.]+),.*?num_updates=1,", log)
    assert m, log[-3000:]
    return float(m.group(1))


# -------------------------------------------------------------------------------------------------------
# fixtures
# -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def roberta_checkpoint(mlm_data, tmp_path_factory) -> Path:
    """A real fairseq RoBERTa checkpoint (current key names, ``cfg`` with an argparse.Namespace model
    section), 12 updates on real Wikipedia text."""
    save = tmp_path_factory.mktemp("roberta")
    run(fairseq_cmd(
        "fairseq_cli.train", str(mlm_data), *FAIRSEQ_COMMON, "--arch", "roberta_base",
        "--encoder-layers", "2", "--encoder-embed-dim", "64", "--encoder-ffn-embed-dim", "128",
        "--encoder-attention-heads", "4", "--max-positions", "256", "--lr", "5e-3", "--max-update", "12",
        "--save-dir", str(save),
    ))
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="session")
def dictionary(mlm_data):
    return masked_lm_dictionary(mlm_data / "dict.txt")


@pytest.fixture(scope="session")
def roberta(roberta_checkpoint):
    return load_roberta_state(roberta_checkpoint)


@pytest.fixture(scope="session")
def roberta_reference(roberta_checkpoint, mlm_data):
    """fairseq's own RobertaModel, loaded by fairseq (with argparse.Namespace narrowly allowed). fairseq's
    unwrapped loader: the one etc-fairseq installs builds ETC models only, and this RoBERTa checkpoint is
    the one this session trained."""
    from fairseq import checkpoint_utils

    load = getattr(checkpoint_utils.load_checkpoint_to_cpu, "__wrapped__", checkpoint_utils.load_checkpoint_to_cpu)
    with torch.serialization.safe_globals([argparse.Namespace]):
        state = load(str(roberta_checkpoint), {"data": str(mlm_data)})
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(roberta_checkpoint)], state=state)
    return models[0].eval(), task.source_dictionary


@pytest.fixture(scope="session")
def valid_batch(mlm_data, dictionary):
    """int64 [4, T]: real validation lines of different lengths, <s>-prefixed, right-padded."""
    from fairseq.data import data_utils

    ds = data_utils.load_indexed_dataset(str(mlm_data / "valid"), dictionary)
    lengths = [len(ds[i]) for i in range(len(ds))]
    order = sorted(range(len(ds)), key=lambda i: -lengths[i])
    picks = [order[0], order[len(order) // 4], order[len(order) // 2], order[-1]]
    seqs = [torch.cat([torch.tensor([dictionary.bos()]), ds[i]]) for i in picks]
    assert max(len(s) for s in seqs) <= 256
    tokens = data_utils.collate_tokens(seqs, dictionary.pad())
    assert tokens.eq(dictionary.pad()).any() and tokens.size(1) > 100
    return tokens


@pytest.fixture(scope="session")
def lifted_via_cli(roberta_checkpoint, mlm_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("lifted") / "lifted.pt"
    rc = lift_main([str(roberta_checkpoint), *ETC_FLAGS, "--dict", str(mlm_data / "dict.txt"), "--out", str(out), "-q"])
    assert rc == 0 and out.is_file()
    return out


def exact_config(**sharing):
    return config_for_arch(
        "etc_tiny", **ETC_OVERRIDES, use_absolute_positions=True, local_radius=256, **sharing
    )


SHARINGS = {
    "separate": dict(),
    "all_shared": dict(shared_q=True, shared_kv=True, shared_out_proj=True, separate_ffn=False,
                       shared_relative_embeddings=True),
    "separate_ffn": dict(separate_ffn=True),
    "mixed": dict(shared_q=True, shared_kv=False, shared_out_proj=True, separate_ffn=True),
}


# -------------------------------------------------------------------------------------------------------
# exactness
# -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sharing", list(SHARINGS))
def test_lifted_etc_computes_roberta_exactly(sharing, roberta, roberta_reference, dictionary, valid_batch):
    state, rcfg = roberta
    assert (rcfg.encoder_layers, rcfg.encoder_embed_dim, rcfg.encoder_ffn_embed_dim, rcfg.encoder_attention_heads) == (2, 64, 128, 4)
    ref, ref_dict = roberta_reference
    assert len(ref_dict) == len(dictionary) == 2009  # 4 specials + 2004 dict.txt entries + <mask>

    cfg = exact_config(**SHARINGS[sharing])
    etc_state, report = lift(state, rcfg, cfg, dictionary)
    for k in etc_state:
        if ".rel_emb." in k:
            etc_state[k] = torch.zeros_like(etc_state[k])
    model = build_etc_model(cfg, dictionary)
    model.load_state_dict(etc_state, strict=True)
    model.eval()

    tokens = valid_batch
    nonpad = tokens.ne(dictionary.pad())
    empty = tokens.new_zeros(tokens.size(0), 0)
    with torch.no_grad():
        ref_features, _ = ref(tokens, features_only=True)
        etc_features, extra = model(tokens, features_only=True, global_tokens=empty, global_types=empty)
        ref_logits, _ = ref(tokens)
        etc_logits, _ = model(tokens, global_tokens=empty, global_types=empty)
    assert extra["global_features"].shape == (tokens.size(0), 0, 64)
    assert (etc_features - ref_features)[nonpad].abs().max().item() < 1e-4
    assert (etc_logits - ref_logits)[nonpad].abs().max().item() < 1e-4
    # the reference is not trivially reproducible: relative-label vectors do change the output
    rel_emb = model.encoder.sentence_encoder.layers[0].self_attn.rel_emb
    rel_emb["shared" if cfg.shared_relative_embeddings else "long"].data.normal_(0, 1)
    with torch.no_grad():
        perturbed, _ = model(tokens, features_only=True, global_tokens=empty, global_types=empty)
    assert (perturbed - ref_features)[nonpad].abs().max().item() > 1e-2

    # Every ETC copy (including the global-side ones the empty global input does not exercise) holds
    # RoBERTa's tensor.
    for etc_key, rob_key in report.lifted.items():
        if "embed_positions" in etc_key:
            continue
        assert torch.equal(etc_state[etc_key], state[rob_key]), etc_key
    layer = model.encoder.sentence_encoder.layers[0]
    expected_q = {"shared"} if cfg.shared_q else {"long", "global"}
    assert set(layer.self_attn.q_proj) == expected_q
    for copy in layer.self_attn.k_proj:
        assert f"encoder.sentence_encoder.layers.1.self_attn.k_proj.{copy}.weight" in report.lifted
    # fresh: relative labels, global token types, the format version buffer and ETC-only heads (CPC,
    # paper appendix D); nothing that RoBERTa has
    fresh_kinds = {re.sub(r"layers\.\d+\.", "layers.N.", k) for k in report.fresh}
    rel = {"encoder.sentence_encoder.layers.N.self_attn.rel_emb." + s
           for s in (["shared"] if cfg.shared_relative_embeddings else ["long", "global"])}
    expected = rel | {"encoder.sentence_encoder.embed_global_types.weight", "encoder.version"}
    assert expected <= fresh_kinds
    assert all(k.startswith("cpc_") for k in fresh_kinds - expected), fresh_kinds - expected
    assert set(report.lifted) | set(report.fresh) == set(model.state_dict())
    assert set(report.dropped) == {"encoder.sentence_encoder.version"}
    assert report.groups["position embeddings"] == 1
    assert report.lifted["encoder.lm_head.weight"] == "encoder.sentence_encoder.embed_tokens.weight"


def test_positions_dropped_by_default_and_overlap_copied(roberta, dictionary):
    state, rcfg = roberta
    etc_state, report = lift(state, rcfg, config_for_arch("etc_tiny", **ETC_OVERRIDES), dictionary)
    assert "encoder.sentence_encoder.embed_positions.weight" not in etc_state
    assert "absolute position" in report.dropped["encoder.sentence_encoder.embed_positions.weight"]
    assert "absolute position" in report.summary()

    # A longer ETC table: RoBERTa's 258 rows are copied, the rest keep ETC's init; noted in the report.
    cfg = config_for_arch("etc_tiny", encoder_ffn_embed_dim=128, max_positions=512, use_absolute_positions=True)
    etc_state, report = lift(state, rcfg, cfg, dictionary)
    pos = etc_state["encoder.sentence_encoder.embed_positions.weight"]
    src = state["encoder.sentence_encoder.embed_positions.weight"]
    assert pos.shape == (514, 64) and src.shape == (258, 64)
    assert torch.equal(pos[:258], src) and pos[258:].abs().sum() > 0
    assert any("keep ETC's own initialisation" in n for n in report.notes)

    # A shorter one: the first rows.
    cfg = config_for_arch("etc_tiny", encoder_ffn_embed_dim=128, max_positions=128, use_absolute_positions=True)
    etc_state, report = lift(state, rcfg, cfg, dictionary)
    assert torch.equal(etc_state["encoder.sentence_encoder.embed_positions.weight"], src[:130])
    assert any("were dropped" in n for n in report.notes)


# -------------------------------------------------------------------------------------------------------
# 2019 names
# -------------------------------------------------------------------------------------------------------


def to_2019_names(state):
    """Current RoBERTa names -> the 2019 released ones (decoder.*, emb_layer_norm, packed in_proj)."""
    out = {}
    for k, v in state.items():
        m = re.match(r"(.*\.self_attn\.)([qkv])_proj\.(weight|bias)$", k)
        if m:
            prefix, which, kind = m.groups()
            if which != "q":
                continue
            out[f"{prefix.replace('encoder.', 'decoder.', 1)}in_proj_{kind}"] = torch.cat(
                [state[f"{prefix}{w}_proj.{kind}"] for w in "qkv"], dim=0
            ).clone()
            continue
        out[k.replace("encoder.", "decoder.", 1).replace(".layernorm_embedding.", ".emb_layer_norm.")] = v.clone()
    return out


@pytest.mark.parametrize("legacy_format", [False, True])
def test_2019_key_names_lift_identically(legacy_format, roberta_checkpoint, roberta, dictionary, tmp_path):
    state, rcfg = roberta
    with torch.serialization.safe_globals([argparse.Namespace]):
        original = torch.load(roberta_checkpoint)
    old = to_2019_names(original["model"])
    assert any(k.endswith("self_attn.in_proj_weight") for k in old)
    assert "decoder.sentence_encoder.emb_layer_norm.weight" in old
    assert not any(k.startswith("encoder.") for k in old)
    path = tmp_path / "model_2019.pt"
    # argparse-era layout: `args` Namespace, no cfg; old fairseq stored numpy scalars (val_loss).
    torch.save(
        {"args": original["cfg"]["model"], "model": old, "extra_state": {"val_loss": np.float64(9.5)}},
        path, _use_new_zipfile_serialization=not legacy_format,
    )
    old_state, old_cfg = load_roberta_state(path)
    assert old_cfg == rcfg.__class__(**{**vars(rcfg), "source": "args"})
    assert set(old_state) == set(state)

    for sharing in ("separate", "all_shared"):
        cfg = exact_config(**SHARINGS[sharing])
        a, rep_a = lift(state, rcfg, cfg, dictionary)
        b, rep_b = lift(old_state, old_cfg, cfg, dictionary)
        assert rep_a.lifted == rep_b.lifted and rep_a.fresh == rep_b.fresh
        assert list(a) == list(b)
        for k in a:
            assert torch.equal(a[k], b[k]), k  # lifted ones identical; fresh ones identical by seed


# -------------------------------------------------------------------------------------------------------
# refusals
# -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,wrong",
    [("encoder_layers", 3), ("encoder_embed_dim", 128), ("encoder_attention_heads", 8), ("encoder_ffn_embed_dim", 256)],
)
def test_size_mismatch_is_refused_naming_both_values(field, wrong, roberta, dictionary):
    state, rcfg = roberta
    right = ROBERTA_SIZE[field]
    cfg = config_for_arch("etc_tiny", **{**ETC_OVERRIDES, field: wrong})
    with pytest.raises(LiftError, match=rf"{field}: RoBERTa checkpoint has {right}, ETC config \(etc_tiny\) has {wrong}"):
        lift(state, rcfg, cfg, dictionary)


def test_cli_refuses_size_mismatch_and_existing_output(roberta_checkpoint, tmp_path, capsys):
    out = tmp_path / "x.pt"
    rc = lift_main([str(roberta_checkpoint), "--arch", "etc_tiny", "--out", str(out)])  # etc_tiny FFN is 256
    err = capsys.readouterr().err
    assert rc == 1 and not out.exists()
    assert "encoder_ffn_embed_dim" in err and "has 128" in err and "has 256" in err
    assert "--encoder-ffn-embed-dim 128" in err and str(roberta_checkpoint) in err
    out.write_bytes(b"")
    rc = lift_main([str(roberta_checkpoint), *ETC_FLAGS, "--out", str(out)])
    assert rc == 1 and "--overwrite" in capsys.readouterr().err
    rc = lift_main([str(roberta_checkpoint), *ETC_FLAGS, "--out", str(out), "--overwrite"])
    assert rc == 1 and "is not a checkpoint etc-lift wrote" in capsys.readouterr().err and out.read_bytes() == b""
    out.unlink()
    assert lift_main([str(roberta_checkpoint), *ETC_FLAGS, "--out", str(out), "-q"]) == 0
    assert lift_main([str(roberta_checkpoint), *ETC_FLAGS, "--seed", "2", "--out", str(out), "-q", "--overwrite"]) == 0
    assert torch.load(out)["extra_state"]["lifted_from"]["seed"] == 2  # its own earlier output was replaced


def test_dictionary_mismatch_is_refused(roberta, mlm_data, tmp_path):
    state, rcfg = roberta
    cfg = config_for_arch("etc_tiny", **ETC_OVERRIDES)
    lines = (mlm_data / "dict.txt").read_text(encoding="utf-8").splitlines()
    short = tmp_path / "short" / "dict.txt"
    short.parent.mkdir()
    short.write_text("\n".join(lines[:-3]) + "\n", encoding="utf-8")  # lost its madeupword padding
    with pytest.raises(LiftError) as e:
        lift(state, rcfg, cfg, masked_lm_dictionary(short))
    msg = str(e.value)
    assert str(short) in msg and "2006 symbols" in msg and "2001 dict.txt entries" in msg and "<mask>" in msg
    assert "2009 rows" in msg and "multiple of 8" in msg
    longer = tmp_path / "long" / "dict.txt"
    longer.parent.mkdir()
    longer.write_text("\n".join(lines + ["extra1 1", "extra2 1"]) + "\n", encoding="utf-8")
    with pytest.raises(LiftError, match="2011 symbols .* 2009 rows"):
        lift(state, rcfg, cfg, masked_lm_dictionary(longer))
    # no dictionary: the checkpoint's own vocabulary (embedding rows == LM head rows) is used
    etc_state, _ = lift(state, rcfg, cfg, None)
    assert etc_state["encoder.lm_head.bias"].shape == (2009,)
    broken = dict(state)
    broken["encoder.lm_head.bias"] = torch.zeros(2000)
    with pytest.raises(LiftError, match="encoder.lm_head.bias has 2000 rows .* 2009"):
        lift(broken, rcfg, cfg, None)


class _RunsCode:
    """Pickles as a call to os.system: what a malicious checkpoint looks like."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("legacy_format", [False, True])
def test_unsafe_pickle_is_refused_and_not_run(legacy_format, tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"args": _RunsCode(marker), "model": {"w": torch.zeros(1)}}, path,
               _use_new_zipfile_serialization=not legacy_format)
    assert not marker.exists()
    with pytest.raises(CheckpointLoadError) as e:
        load_checkpoint(path, legacy_configs=True)  # the reader etc-lift uses
    msg = str(e.value)
    assert str(path) in msg and f"{os.system.__module__}.system" in msg and "refusing" in msg
    assert not marker.exists()
    with pytest.raises(CheckpointLoadError):
        load_roberta_state(path)
    assert not marker.exists()


def test_other_unusable_inputs_are_refused(roberta, dictionary, tmp_path):
    state, rcfg = roberta
    with pytest.raises(CheckpointLoadError, match="missing.pt: no such checkpoint file"):
        load_roberta_state(tmp_path / "missing.pt")
    cfg = config_for_arch("etc_tiny", **ETC_OVERRIDES)
    extra = dict(state)
    extra["encoder.sentence_encoder.adapter.weight"] = torch.zeros(3)
    with pytest.raises(LiftError, match="does not know how to lift.*adapter"):
        lift(extra, rcfg, cfg, dictionary)
    _, report = lift(extra, rcfg, cfg, dictionary, drop_unknown=True)
    assert "encoder.sentence_encoder.adapter.weight" in report.dropped
    heads = dict(state)
    heads["classification_heads.mnli.dense.weight"] = torch.zeros(64, 64)
    _, report = lift(heads, rcfg, cfg, dictionary)
    assert "classification head" in report.dropped["classification_heads.mnli.dense.weight"]
    assert "classification heads not lifted: mnli" in report.summary()
    prenorm = rcfg.__class__(**{**vars(rcfg), "encoder_normalize_before": True})
    with pytest.raises(LiftError, match="pre-LayerNorm"):
        lift(state, prenorm, cfg, dictionary)
    untied = dict(state)
    untied["encoder.lm_head.weight"] = state["encoder.lm_head.weight"] + 1
    with pytest.raises(LiftError, match="tied"):
        lift(untied, rcfg, cfg, dictionary)
    assert set(normalise_roberta_state(state)) == set(state)  # current names are kept


def test_half_precision_checkpoint_is_cast_to_the_etc_dtype(roberta, dictionary):
    state, rcfg = roberta
    half = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    etc_state, report = lift(half, rcfg, config_for_arch("etc_tiny", **ETC_OVERRIDES), dictionary)
    emb = etc_state["encoder.sentence_encoder.embed_tokens.weight"]
    assert emb.dtype == torch.float32 and torch.equal(emb, half["encoder.sentence_encoder.embed_tokens.weight"].float())
    assert any("float16" in n for n in report.notes)


# -------------------------------------------------------------------------------------------------------
# CLI and fairseq-train
# -------------------------------------------------------------------------------------------------------


def test_etc_lift_help():
    exe = shutil.which("etc-lift", path=str(Path(sys.executable).parent))
    assert exe, "etc-lift console script missing: pip install -e ."
    out = run([exe, "--help"], timeout=120)
    assert "SOURCE" in out and "--encoder-layers" in out and "--use-absolute-positions" in out
    assert "--shared-kv" in out and "--dict" in out


def test_cli_output_is_a_plain_fairseq_checkpoint(lifted_via_cli):
    state = torch.load(lifted_via_cli)  # default weights_only=True: plain data only
    assert state["cfg"]["model"]["_name"] == "etc_tiny"
    assert state["cfg"]["model"]["encoder_ffn_embed_dim"] == 128
    assert state["model"]["encoder.version"].item() == 1
    assert state["model"]["encoder.lm_head.weight"].data_ptr() == state["model"]["encoder.sentence_encoder.embed_tokens.weight"].data_ptr()
    from fairseq import checkpoint_utils

    loaded = checkpoint_utils.load_checkpoint_to_cpu(str(lifted_via_cli))
    assert loaded["cfg"].model._name == "etc_tiny"


def test_cli_prints_summary(roberta_checkpoint, tmp_path, capsys):
    out = tmp_path / "lifted.pt"
    rc = lift_main([str(roberta_checkpoint), *ETC_FLAGS, "--use-absolute-positions", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and out.is_file()
    assert re.search(r"lifted \d+ ETC tensors from 41 RoBERTa tensors", text)
    assert "attention k" in text and "relative-label embeddings" in text and "created fresh" in text
    assert "--finetune-from-model" in text and "the model fields come from the checkpoint" in text


def test_cli_writes_the_gpt2_tokenizer_of_a_fairseq_roberta(roberta_checkpoint, mlm_data, tmp_path, capsys):
    """--gpt2-encoder-json/--gpt2-vocab-bpe (fairseq's released RoBERTa models use GPT-2 BPE; the checkpoint
    names no tokenizer): copied next to --out and named in etc_tokenizer.json, so the hub and
    etc-prepare --from-model cut text into GPT-2 ids through the dict.txt. Without them no tokenizer is
    claimed. The GPT-2 files and the dict's first entries here are CONSTRUCTED (tiny, same format)."""
    import json

    from etc_fairseq.models import EtcModel
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    src = tmp_path / "src"
    src.mkdir()
    lines = (mlm_data / "dict.txt").read_text(encoding="utf-8").splitlines()
    # same size as the checkpoint's rows; made-up GPT-2 ids 900000..900005 (not among the real symbols) first
    gpt2_dict = src / "dict.txt"
    gpt2_dict.write_text("\n".join([f"{900000 + i} 100" for i in range(6)] + lines[6:]) + "\n", encoding="utf-8")
    pieces = ["a", "b", "\u0120", "ab", "\u0120ab", "\u0120a"]
    (src / "encoder.json").write_text(json.dumps({p: 900000 + i for i, p in enumerate(pieces)}))
    (src / "vocab.bpe").write_text("#version: 0.2\na b\n\u0120 ab\n\u0120 a\n", encoding="utf-8")
    gpt2 = ["--gpt2-encoder-json", str(src / "encoder.json"), "--gpt2-vocab-bpe", str(src / "vocab.bpe")]

    out = tmp_path / "lifted" / "model.pt"
    assert lift_main([str(roberta_checkpoint), *ETC_FLAGS, "--dict", str(gpt2_dict), *gpt2, "--out", str(out), "-q"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["dict.txt", "encoder.json", "etc_tokenizer.json",
                                                            "model.pt", "vocab.bpe"]
    desc = json.loads((out.parent / "etc_tokenizer.json").read_text())
    assert (desc["type"], desc["encoder_json"], desc["vocab_bpe"]) == ("gpt2_bpe", "encoder.json", "vocab.bpe")
    hub = EtcModel.from_pretrained(str(out.parent), checkpoint_file="model.pt")
    d = hub.dictionary
    ids = [d.index(str(900000 + i)) for i in (3, 4, 5)]  # "ab", " ab", " a"
    assert d.unk() not in ids
    assert hub.encode("ab ab a").tolist() == [d.bos(), *ids, d.eos()]
    tok = WordPieceTokenizer.from_model(out.parent)
    assert tok.kind == "gpt2_bpe" and tok.encode_words(["ab", "ab", "a"]) == (ids, [0, 1, 2])

    # without the GPT-2 files: no tokenizer is claimed (the summary says how to give one)
    capsys.readouterr()
    plain = tmp_path / "plain" / "model.pt"
    assert lift_main([str(roberta_checkpoint), *ETC_FLAGS, "--dict", str(gpt2_dict), "--out", str(plain)]) == 0
    assert "pass --gpt2-encoder-json and --gpt2-vocab-bpe" in capsys.readouterr().out
    assert sorted(p.name for p in plain.parent.iterdir()) == ["dict.txt", "model.pt"]
    # refused in one line, nothing written: one file only, no --dict, a file that is not GPT-2's encoder.json
    (src / "bad.json").write_text("[1, 2]")
    for argv, words in (
        ([*gpt2[:2], "--dict", str(gpt2_dict)], "go together"),
        ([*gpt2], "need --dict"),
        (["--gpt2-encoder-json", str(src / "bad.json"), *gpt2[2:], "--dict", str(gpt2_dict)], "bad.json: not GPT-2's encoder.json"),
    ):
        bad_out = tmp_path / "refused" / "model.pt"
        assert lift_main([str(roberta_checkpoint), *ETC_FLAGS, *argv, "--out", str(bad_out)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
        assert not bad_out.parent.exists()


def test_fairseq_train_finetunes_from_lifted_checkpoint(lifted_via_cli, mlm_data, tmp_path):
    common = [str(mlm_data), "--user-dir", USER_DIR, *FAIRSEQ_COMMON, *ETC_FLAGS,
              "--lr", "1e-4", "--max-update", "2", "--no-save"]
    lifted_cmd = fairseq_cmd("fairseq_cli.train", *common, "--save-dir", str(tmp_path / "a"),
                             "--finetune-from-model", str(lifted_via_cli))
    scratch_cmd = fairseq_cmd("fairseq_cli.train", *common, "--save-dir", str(tmp_path / "b"))
    with ThreadPoolExecutor(2) as pool:  # the two runs side by side
        lifted_log, scratch_log = pool.map(run, (lifted_cmd, scratch_cmd))
    assert "loading pretrained model from" in lifted_log
    assert re.search(r"Loaded checkpoint .*lifted\.pt \(epoch 1 @ 0 updates\)", lifted_log)
    lifted, scratch = first_loss(lifted_log), first_loss(scratch_log)
    print(f"first logged loss: lifted {lifted}, from scratch {scratch}")
    assert scratch > 10.5  # ~log2(2009): knows nothing
    assert lifted < scratch - 2.0, (lifted, scratch)  # measured: 7.9 vs 11.0


@pytest.mark.parametrize("legacy_format", [False, True])
def test_checkpoint_allowlist_is_the_narrow_one(legacy_format, tmp_path):
    """etc-lift's reader (legacy_configs=True): Namespace; numpy's globals only when needed. The reader
    every model-building path uses (legacy_configs=False): neither."""
    plain = tmp_path / "plain.pt"
    torch.save({"args": argparse.Namespace(a=1), "model": {"w": torch.ones(2)}}, plain,
               _use_new_zipfile_serialization=not legacy_format)
    assert checkpoint_allowlist(plain, legacy_configs=True) == [argparse.Namespace]
    with pytest.raises(CheckpointLoadError, match=r"plain\.pt: refusing to load checkpoint: its pickle references argparse\.Namespace"):
        checkpoint_allowlist(plain)
    with_numpy = tmp_path / "numpy.pt"
    torch.save({"args": None, "model": {}, "extra_state": {"val_loss": np.float64(1.5)}}, with_numpy,
               _use_new_zipfile_serialization=not legacy_format)
    allowed = checkpoint_allowlist(with_numpy, legacy_configs=True)
    assert np.dtype in allowed and len(allowed) > 3
    assert load_checkpoint(with_numpy, legacy_configs=True)["extra_state"]["val_loss"] == 1.5
    with pytest.raises(CheckpointLoadError, match="refusing to load checkpoint: its pickle references numpy"):
        load_checkpoint(with_numpy)
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"args": _RunsCode(marker)}, evil, _use_new_zipfile_serialization=not legacy_format)
    with pytest.raises(CheckpointLoadError, match="refusing"):
        checkpoint_allowlist(evil, legacy_configs=True)
    assert not marker.exists()
    with pytest.raises(CheckpointLoadError, match="no such checkpoint"):
        checkpoint_allowlist(tmp_path / "missing.pt")