"""The core (etc_fairseq.attention / structure / encoder) runs without fairseq, and the fairseq model
is a wrapper around it: save_pretrained from the fairseq model's encoder, load it in a process where
importing fairseq raises, and get the same long and global features on the same batch."""

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from etc_fairseq.encoder import EtcEncoder, EtcEncoderConfig, CheckpointLoadError
from etc_fairseq.encoder.io import CONFIG_NAME, WEIGHTS_NAME
from etc_fairseq.structure.global_tokens import GlobalTokenType

REPO = Path(__file__).resolve().parents[1]
CORE_PACKAGES = ("attention", "structure", "encoder")

# Runs in a fresh interpreter where only the core's own dependencies import (torch, numpy, safetensors,
# tokenizers): fairseq or a package of an optional extra raises ImportError.
_NO_FAIRSEQ_SCRIPT = textwrap.dedent(
    """
    import importlib.machinery
    import sys

    # what `pip install etc-fairseq` does not install: fairseq and every optional extra's packages
    NOT_INSTALLED = {"fairseq", "fairseq_cli", "omegaconf", "hydra", "sacrebleu", "sklearn", "tensorboardX",
                     "sentencepiece", "mwparserfromhell", "sentencex", "tqdm", "matplotlib", "transformers"}

    class _Refuse:
        def create_module(self, spec):
            raise ImportError(f"{spec.name.split('.')[0]} is not installed here (import of {spec.name!r} refused)")

        def exec_module(self, module):  # never reached
            raise ImportError(module.__name__)

    class _NoFairseq:  # a spec without origin: "not on disk" to a find_spec probe, ImportError to an import
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in NOT_INSTALLED:
                return importlib.machinery.ModuleSpec(name, _Refuse(), origin=None)
            return None

    sys.meta_path.insert(0, _NoFairseq())
    try:
        import fairseq  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("the fairseq blocker did not work")

    from safetensors.torch import load_file, save_file
    import torch

    from etc_fairseq.encoder import EtcEncoder

    model_dir, batch_file, out_file = sys.argv[1:4]
    encoder = EtcEncoder.from_pretrained(model_dir)
    b = load_file(batch_file)
    structure = {k[len("structure."):]: v for k, v in b.items() if k.startswith("structure.")}
    with torch.no_grad():
        out = encoder(b["src_tokens"], b["global_tokens"], b["global_types"], structure)
    save_file({"long": out.long_features.contiguous(), "global": out.global_features.contiguous(),
               "long_padding_mask": out.long_padding_mask.contiguous()}, out_file)
    print("fairseq modules loaded:", sorted(m for m in sys.modules if m.split(".")[0] == "fairseq"))
    """
)


def _batch():
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 50, (2, 23), generator=g)
    src[1, 17:] = 1  # padding (fairseq's pad id)
    global_tokens = torch.full((2, 3), 0, dtype=torch.long)
    global_tokens[1, 2] = 1
    global_types = torch.full((2, 3), int(GlobalTokenType.SENTENCE), dtype=torch.long)
    long_segment = torch.tensor([[0] * 8 + [1] * 7 + [2] * 8, [0] * 9 + [1] * 8 + [-1] * 6])
    return {"src_tokens": src, "global_tokens": global_tokens, "global_types": global_types,
            "structure.long_segment": long_segment}


def _fairseq_model(**overrides):
    from fairseq.data import Dictionary

    from etc_fairseq.models import EtcModel, config_for_arch

    d = Dictionary()
    for i in range(46):
        d.add_symbol(f"w{i}")
    cfg = config_for_arch("etc_tiny", local_radius=3, dropout=0.0, attention_dropout=0.0, **overrides)

    class _Task:
        source_dictionary = d

    torch.manual_seed(1)
    return EtcModel.build_model(cfg, _Task()).eval()


@pytest.mark.parametrize("overrides", [{}, {"relative_bias": True, "shared_kv_per_side": True,
                                            "pre_layer_norm": True, "segment_vocab_size": 16,
                                            "embedding_size": 32, "activation_fn": "gelu_accurate"}])
def test_core_without_fairseq_equals_the_fairseq_model(tmp_path, overrides):
    from safetensors.torch import load_file, save_file

    model = _fairseq_model(**overrides)
    with torch.no_grad():  # make every parameter matter (bias tables start at zero)
        for name, p in model.named_parameters():
            if "rel_bias" in name:
                p.normal_()
    batch = _batch()
    structure = {"long_segment": batch["structure.long_segment"]}
    with torch.no_grad():
        long_ref, extra = model(batch["src_tokens"], features_only=True, global_tokens=batch["global_tokens"],
                                global_types=batch["global_types"], structure=structure)
    model.encoder.sentence_encoder.save_pretrained(tmp_path / "model")
    save_file(batch, str(tmp_path / "batch.safetensors"))
    script = tmp_path / "run_core.py"
    script.write_text(_NO_FAIRSEQ_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "model"), str(tmp_path / "batch.safetensors"),
         str(tmp_path / "out.safetensors")],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fairseq modules loaded: []" in proc.stdout
    got = load_file(str(tmp_path / "out.safetensors"))
    assert torch.equal(got["long"], long_ref)
    assert torch.equal(got["global"], extra["global_features"])
    assert torch.equal(got["long_padding_mask"], extra["long_padding_mask"])
    assert extra["long_padding_mask"][1, 17:].all() and not extra["long_padding_mask"][0].any()


def test_core_packages_do_not_import_fairseq():
    # statically: no module under attention/, structure/, encoder/ names fairseq in an import ...
    # ... nor a dataset's own heads (finetune/<dataset>/heads.py)
    offenders = []
    core_files = [p for pkg in CORE_PACKAGES for p in sorted((REPO / "etc_fairseq" / pkg).glob("*.py"))]
    dataset_heads = sorted((REPO / "etc_fairseq" / "finetune").glob("*/heads.py"))
    assert dataset_heads, "expected OpenKP's heads under finetune/openkp/heads.py"
    for path in core_files + dataset_heads:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "fairseq" or n.startswith("fairseq.") for n in names):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


_OPENKP_HEADS_SCRIPT = _NO_FAIRSEQ_SCRIPT.split("from safetensors.torch")[0] + textwrap.dedent(
    """
    import torch

    from etc_fairseq.finetune.openkp.heads import KeyphraseHead, VisualFeatureEmbedding, keyphrase_loss, keyphrase_targets

    torch.manual_seed(0)
    logits = KeyphraseHead(8, max_n=3)(torch.randn(1, 5, 8), torch.tensor([[0, 0, 1, 2, -1]]), 3)  # [1, 3, 3]
    ngram_ids = torch.tensor([[[0, 1, 2], [3, 4, -1], [5, -1, -1]]])
    targets, found = keyphrase_targets(ngram_ids, torch.tensor([[3]]))
    loss = keyphrase_loss(logits, ngram_ids >= 0, targets)
    long_extra, _ = VisualFeatureEmbedding(8)(torch.rand(1, 2, 20), torch.tensor([[0, 0, 1, -1]]),
                                               torch.tensor([[False, False]]))
    assert found.tolist() == [1] and loss.shape == (1,) and long_extra.shape == (1, 4, 8)
    print("fairseq modules loaded:", sorted(m for m in sys.modules if m.split(".")[0] == "fairseq"))
    """
)


def test_openkp_heads_run_without_fairseq(tmp_path):
    script = tmp_path / "run_heads.py"
    script.write_text(_OPENKP_HEADS_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fairseq modules loaded: []" in proc.stdout


def _tiny_core(**overrides):
    cfg = EtcEncoderConfig(encoder_layers=1, encoder_embed_dim=16, encoder_ffn_embed_dim=32,
                           encoder_attention_heads=2, local_radius=2, relative_pos_max_distance=2, **overrides)
    torch.manual_seed(0)
    return EtcEncoder(cfg, vocab_size=20, padding_idx=1, fixed_block_token_id=0).eval()


def test_save_and_load_round_trip_with_fixed_blocks(tmp_path):
    enc = _tiny_core(fixed_block_len=4)
    enc.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CONFIG_NAME, WEIGHTS_NAME]
    back = EtcEncoder.from_pretrained(tmp_path)
    assert back.cfg == enc.cfg and (back.vocab_size, back.padding_idx) == (20, 1)
    tokens = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, 1, 1, 1, 1]])
    with torch.no_grad():
        a, b = enc(tokens), back(tokens)
    assert a.global_tokens.tolist() == [[0, 0], [0, 1]]  # one fixed block per 4 tokens, padded
    assert torch.equal(a.long_features, b.long_features) and torch.equal(a.global_features, b.global_features)


def test_from_pretrained_refuses_unknown_fields_and_mismatched_weights(tmp_path):
    from etc_fairseq import checkpoint_io

    assert CheckpointLoadError is checkpoint_io.CheckpointLoadError  # one loading error, core and fairseq side
    enc = _tiny_core()
    enc.save_pretrained(tmp_path)
    meta = json.loads((tmp_path / CONFIG_NAME).read_text())
    bad = dict(meta, config=dict(meta["config"], rotary=True))
    (tmp_path / CONFIG_NAME).write_text(json.dumps(bad))
    with pytest.raises(CheckpointLoadError, match=r"config.json: unknown config field\(s\) \['rotary'\]"):
        EtcEncoder.from_pretrained(tmp_path)
    (tmp_path / CONFIG_NAME).write_text(json.dumps(dict(meta, extra=1)))
    with pytest.raises(CheckpointLoadError, match=r"unknown key\(s\) \['extra'\]"):
        EtcEncoder.from_pretrained(tmp_path)
    (tmp_path / CONFIG_NAME).write_text(json.dumps(dict(meta, config=dict(meta["config"], local_radius="3"))))
    with pytest.raises(CheckpointLoadError, match="'local_radius' = '3': expected int"):
        EtcEncoder.from_pretrained(tmp_path)
    (tmp_path / CONFIG_NAME).write_text(json.dumps(dict(meta, config=dict(meta["config"], relative_bias=True))))
    with pytest.raises(CheckpointLoadError, match=r"model.safetensors: tensors do not match config.json: missing"):
        EtcEncoder.from_pretrained(tmp_path)
    (tmp_path / CONFIG_NAME).write_text(json.dumps(dict(meta, vocab_size=21)))
    with pytest.raises(CheckpointLoadError, match=r"embed_tokens.weight' has shape \(20, 16\)"):
        EtcEncoder.from_pretrained(tmp_path)
    (tmp_path / CONFIG_NAME).unlink()
    with pytest.raises(CheckpointLoadError, match="config.json: missing"):
        EtcEncoder.from_pretrained(tmp_path)


def test_fairseq_config_exposes_every_core_field_with_its_help():
    import argparse

    from fairseq.dataclass.utils import gen_parser_from_dataclass

    from etc_fairseq.models.etc import EtcConfig

    core = EtcEncoderConfig.__dataclass_fields__
    assert set(core) <= set(EtcConfig.__dataclass_fields__)
    parser = argparse.ArgumentParser()
    gen_parser_from_dataclass(parser, EtcConfig())
    actions = {a.dest: a for a in parser._actions}
    for name, f in core.items():
        assert name in actions, name
        assert actions[name].help == f.metadata["help"], name
    assert "load_checkpoint_heads" in actions  # the adapter's own field
    # hydra (fairseq-hydra-train) builds its config from the same dataclass
    from omegaconf import OmegaConf

    node = OmegaConf.structured(EtcConfig)
    assert set(core) <= set(node.keys())
    assert node.activation_fn == "gelu" and node.relative_bias is False


@pytest.mark.parametrize("overrides", [{}, {"pre_layer_norm": True, "relative_bias": True, "separate_ffn": True},
                                       {"shared_kv_per_side": True}, {"shared_q": True, "shared_kv": True}])
@pytest.mark.parametrize("side", ["long", "global"])
def test_keep_final_outputs_computes_one_side_exactly_and_removes_what_only_the_other_uses(overrides, side):
    """A fine-tuning task that reads one side: the last layer computes that side only, equal to the full
    model's features, and has no parameter that side does not use (every remaining one gets a gradient)."""
    import copy

    cfg = EtcEncoderConfig(encoder_layers=2, encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_attention_heads=2,
                           local_radius=3, relative_pos_max_distance=2, dropout=0.0, attention_dropout=0.0, **overrides)
    torch.manual_seed(0)
    full = EtcEncoder(cfg, vocab_size=60, padding_idx=1, fixed_block_token_id=0).eval()
    if "rel_bias" in str(list(dict(full.named_parameters()))):
        with torch.no_grad():  # bias tables start at zero: make them matter
            for name, p in full.named_parameters():
                if "rel_bias" in name:
                    p.normal_()
    pruned = copy.deepcopy(full)
    pruned.keep_final_outputs([side])
    assert pruned.final_outputs == (side,) and full.final_outputs == ("long", "global")
    other = "global" if side == "long" else "long"
    removed = set(dict(full.named_parameters())) - set(dict(pruned.named_parameters()))
    last = f"layers.{len(full.layers) - 1}."
    assert removed and all(k.startswith(last) for k in removed)
    batch = _batch()
    structure = {"long_segment": batch["structure.long_segment"]}
    args = (batch["src_tokens"], batch["global_tokens"], batch["global_types"], structure)
    with torch.no_grad():
        a, b = full(*args), pruned(*args)
    kept, dropped = (b.long_features, b.global_features) if side == "long" else (b.global_features, b.long_features)
    assert dropped is None
    assert torch.equal(kept, a.long_features if side == "long" else a.global_features)
    out = pruned(*args)
    feats = out.long_features if side == "long" else out.global_features
    feats.float().pow(2).sum().backward()
    assert [n for n, p in pruned.named_parameters() if p.grad is None] == []
    # without pruning, exactly the removed parameters get no gradient from this side's loss
    out = full(*args)
    (out.long_features if side == "long" else out.global_features).float().pow(2).sum().backward()
    assert {n for n, p in full.named_parameters() if p.grad is None} == removed
    with pytest.raises(ValueError, match="complete encoders only"):
        pruned.save_pretrained("unused-dir")
    assert other not in pruned.final_outputs
