"""``fairseq-hydra-train`` with the shipped yaml configs (``examples/pretraining/config/etc_tiny.yaml`` and
``examples/nextsent/config/etc_tiny.yaml``), at tiny scale (2 updates, real Wikipedia-derived data).

What is proven: an architecture name in ``model._name`` builds that architecture (before the fix in
:mod:`etc_fairseq.fairseq_fixes.yaml_architecture` ``_name: etc_tiny`` built a 144M-parameter model): the logged
parameter count equals that of the same task's model built from ``config_for_arch("etc_tiny")``, and the
checkpoint's model config holds etc_tiny's sizes; a field set on the command line wins over the
architecture; the pure fill step keeps fields the yaml sets.
"""

import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]


def hydra_train(config_dir: str, data: Path, save: Path, cwd: Path, *overrides: str) -> str:
    proc = run_python(
        ["-m", "fairseq_cli.hydra_train", "--config-dir", str(REPO / config_dir),
         "--config-name", "etc_tiny", f"task.data={data}", f"checkpoint.save_dir={save}",
         f"common.user_dir={REPO / 'user_dir'}", "optimization.max_update=2", *overrides],
        cwd=cwd, timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def logged_params(log: str) -> int:
    m = re.search(r"num\. shared model params: ([\d,]+)", log)
    assert m, log[-3000:]
    return int(m.group(1).replace(",", ""))


def expected_params(checkpoint: Path, arch: str, **overrides) -> int:
    """Parameters of the checkpoint's task's model built from ``config_for_arch(arch)`` here."""
    import etc_fairseq.register  # noqa: F401
    from fairseq import tasks

    from etc_fairseq.models import config_for_arch

    state = torch.load(checkpoint)
    task = tasks.setup_task(OmegaConf.create(state["cfg"]["task"]))
    model = task.build_model(config_for_arch(arch, **overrides))
    return sum(p.numel() for p in model.parameters())


def test_pretraining_yaml_builds_the_named_architecture(pretrain_data, tmp_path):
    from etc_fairseq.models import config_for_arch

    tiny = config_for_arch("etc_tiny")
    save = tmp_path / "ckpt"
    log = hydra_train("examples/pretraining/config", pretrain_data, save, tmp_path)
    assert re.search(r"num_updates=2\b|done training", log)
    ckpt = save / "checkpoint_last.pt"
    model_cfg = torch.load(ckpt)["cfg"]["model"]
    assert model_cfg["_name"] == "etc_tiny"
    for name in ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads",
                 "local_radius", "relative_pos_max_distance", "max_global_positions", "fixed_block_len"):
        assert model_cfg[name] == getattr(tiny, name), name
    n = logged_params(log)
    assert n == expected_params(ckpt, "etc_tiny") and n < 1_000_000  # etc_base would be ~144M

    # a field on the command line wins over the architecture; the rest stays etc_tiny
    save3 = tmp_path / "ckpt3"
    log3 = hydra_train("examples/pretraining/config", pretrain_data, save3, tmp_path, "+model.encoder_layers=3")
    cfg3 = torch.load(save3 / "checkpoint_last.pt")["cfg"]["model"]
    assert cfg3["encoder_layers"] == 3 and cfg3["encoder_embed_dim"] == 64 and cfg3["local_radius"] == 16
    assert logged_params(log3) == expected_params(save3 / "checkpoint_last.pt", "etc_tiny", encoder_layers=3) > n


def test_nextsent_yaml_fine_tunes_the_named_architecture(wiki_dump, pretrain_data, tmp_path):
    from etc_fairseq.cli.prepare import main as prepare_main

    data = tmp_path / "data"
    assert prepare_main([
        "nextsent", "--dump", str(wiki_dump), "--train", "6", "--valid", "2", "--seed", "2",
        "--out", str(data), "--pretrain-dir", str(pretrain_data), "--max-long-len", "1024",
        "--max-global-len", "128", "--distractors", "2", "--distractor-paragraphs", "1", "--same-article", "1",
    ]) == 0
    save = tmp_path / "ckpt"
    log = hydra_train("examples/nextsent/config", data, save, tmp_path)
    assert re.search(r"valid on 'valid' subset .*mrr", log), log[-3000:]
    ckpt = save / "checkpoint_last.pt"
    model_cfg = torch.load(ckpt)["cfg"]["model"]
    assert (model_cfg["_name"], model_cfg["encoder_layers"], model_cfg["encoder_embed_dim"]) == ("etc_tiny", 2, 64)
    assert logged_params(log) == expected_params(ckpt, "etc_tiny")

    # checkpoint.finetune_from_model: the model fields the yaml leaves unset come from the checkpoint's own
    # config (as fairseq-train --finetune-from-model), not from etc_tiny; the command line still wins
    source = checkpoint_with_fields(ckpt, tmp_path / "source.pt", local_radius=5, dropout=0.2)
    save2 = tmp_path / "ckpt2"
    hydra_train("examples/nextsent/config", data, save2, tmp_path, f"checkpoint.finetune_from_model={source}",
                "+model.attention_dropout=0.05")
    tuned = torch.load(save2 / "checkpoint_last.pt")["cfg"]["model"]
    assert (tuned["local_radius"], tuned["dropout"], tuned["attention_dropout"]) == (5, 0.2, 0.05)
    assert tuned["encoder_layers"] == 2 and tuned["fixed_block_len"] == model_cfg["fixed_block_len"]


def checkpoint_with_fields(checkpoint: Path, out: Path, **fields) -> Path:
    """A copy of ``checkpoint`` whose stored model config differs in ``fields`` (none that changes a weight
    shape), so a test sees which config a model was built from."""
    state = torch.load(checkpoint)
    for name, value in fields.items():
        assert state["cfg"]["model"][name] != value, name
        state["cfg"]["model"][name] = value
    torch.save(state, out)
    return out


@pytest.mark.parametrize("name", ["etc_tiny", "etc"])
def test_yaml_finetune_from_model_fills_unset_fields_from_the_checkpoint(etc_tiny_checkpoint, tmp_path, name):
    import etc_fairseq.register  # noqa: F401
    from fairseq.dataclass.initialize import add_defaults

    source = checkpoint_with_fields(etc_tiny_checkpoint, tmp_path / "source.pt", local_radius=5, encoder_layers=3)
    cfg = OmegaConf.create({"model": {"_name": name, "dropout": 0.3},
                            "checkpoint": {"finetune_from_model": str(source)}})
    add_defaults(cfg)
    # from the checkpoint (also fields etc_tiny would set, and ones the plain etc model defaults differently)
    assert (cfg.model.local_radius, cfg.model.encoder_layers, cfg.model.encoder_embed_dim) == (5, 3, 64)
    assert cfg.model.dropout == 0.3  # set in the yaml
    plain = OmegaConf.create({"model": {"_name": name}})
    add_defaults(plain)
    assert plain.model.local_radius == (16 if name == "etc_tiny" else 84)


@pytest.mark.parametrize("model", [{"_name": "etc_tiny", "encoder_layers": 3, "dropout": 0.3}, "etc_tiny"])
def test_yaml_architecture_fill_keeps_set_fields(model):
    import etc_fairseq.register  # noqa: F401
    from fairseq.dataclass.initialize import add_defaults

    cfg = OmegaConf.create({"model": model})
    add_defaults(cfg)  # fairseq's, with the architecture step installed by etc_fairseq.register
    layers, dropout = (3, 0.3) if isinstance(model, dict) else (2, 0.1)
    assert cfg.model.encoder_layers == layers and cfg.model.dropout == dropout
    assert (cfg.model.encoder_embed_dim, cfg.model.local_radius, cfg.model.fixed_block_len) == (64, 16, 16)
    # another model, and the plain "etc" model, are left to fairseq
    other = OmegaConf.create({"model": {"_name": "etc"}})
    add_defaults(other)
    assert other.model.encoder_layers == 12
