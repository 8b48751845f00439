"""Lifting Hugging Face BERT and RoBERTa directories into ETC (``etc_fairseq.lift.huggingface``).

Randomly initialised ``transformers`` models (no download) are saved with ``save_pretrained``, lifted, and
the lifted ETC model, with a radius covering the input, zero relative-label vectors and an empty global
input (the configuration in which ETC's attention is the source's full attention), must give the source
model's features and MLM logits."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from etc_fairseq.lift import LiftError  # noqa: E402
from etc_fairseq.models.lifting import build_etc_model  # noqa: E402
from etc_fairseq.lift.huggingface import (  # noqa: E402
    fairseq_dictionary,
    is_huggingface_dir,
    lift_huggingface_into_etc,
    read_huggingface,
    write_fairseq_dict,
)
from etc_fairseq.models import config_for_arch  # noqa: E402

VOCAB = 60
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def _bert_dir(path, cls_name, safe=True, act="gelu"):
    cfg = transformers.BertConfig(vocab_size=VOCAB, max_position_embeddings=64, type_vocab_size=2,
                                  hidden_act=act, **SIZES)
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(cfg).eval()
    with torch.no_grad():  # non-trivial LayerNorms and biases (HF initialises them to 1 / 0)
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path, safe_serialization=safe)
    words = ["[PAD]"] + [f"[unused{i}]" for i in range(4)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words += [f"w{i}" for i in range(VOCAB - len(words))]
    (path / "vocab.txt").write_text("\n".join(words) + "\n")
    return model


def _roberta_dir(path, cls_name):
    cfg = transformers.RobertaConfig(vocab_size=VOCAB, max_position_embeddings=66, type_vocab_size=1,
                                     pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5, **SIZES)
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path)
    tokens = ["<s>", "<pad>", "</s>", "<unk>"] + [f"\u0120w{i}" for i in range(VOCAB - 5)] + ["<mask>"]
    (path / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (path / "merges.txt").write_text("#version: 0.2\n")
    return model


CASES = {
    "bert_mlm": (_bert_dir, "BertForMaskedLM", {}),
    "bert_base_model_bin": (_bert_dir, "BertModel", {"safe": False}),
    "bert_gelu_new": (_bert_dir, "BertForMaskedLM", {"act": "gelu_new"}),
    "roberta_mlm": (_roberta_dir, "RobertaForMaskedLM", {}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("sharing", ["separate", "shared"])
def test_lifted_huggingface_model_computes_the_source_exactly(case, sharing, tmp_path):
    make, cls_name, kw = CASES[case]
    hf = make(tmp_path, cls_name, **kw)
    assert is_huggingface_dir(tmp_path)
    src = read_huggingface(tmp_path)
    share = dict(shared_q=True, shared_kv=True, shared_out_proj=True) if sharing == "shared" else {}
    cfg = config_for_arch("etc_tiny", **src.etc_overrides(), local_radius=64, **share)
    dictionary = fairseq_dictionary(src.symbols)
    state, report = lift_huggingface_into_etc(src, cfg, build_etc_model(cfg, dictionary, seed=1).state_dict())
    for k in state:
        if ".rel_emb." in k:
            state[k] = torch.zeros_like(state[k])
    model = build_etc_model(cfg, dictionary)
    model.load_state_dict(state, strict=True)
    model.eval()

    g = torch.Generator().manual_seed(1)
    if src.kind == "bert":
        cls_id, sep_id, low = 6, 7, 9
    else:
        cls_id, sep_id, low = 0, 2, 4
    body = torch.randint(low, VOCAB - 1, (3, 20), generator=g)
    hf_ids = torch.cat([torch.full((3, 1), cls_id), body, torch.full((3, 1), sep_id)], dim=1)
    etc_ids = src.fairseq_ids[hf_ids]
    empty = etc_ids.new_zeros(3, 0)
    with torch.no_grad():
        hf_out = hf(input_ids=hf_ids, output_hidden_states=True)
        etc_features, _ = model(etc_ids, features_only=True, global_tokens=empty, global_types=empty)
        etc_logits, _ = model(etc_ids, global_tokens=empty, global_types=empty)
    hf_features = hf_out.hidden_states[-1]
    if cls_name.endswith("MaskedLM"):
        # ETC's logits over the fairseq dictionary, back in the source's id order
        assert (etc_logits[..., src.fairseq_ids] - hf_out.logits).abs().max().item() < 1e-4
    assert (etc_features - hf_features).abs().max().item() < 1e-4
    if cls_name == "BertModel":
        assert set(report.dropped) == {"pooler.dense.weight", "pooler.dense.bias"}
        assert any("no LM head" in n for n in report.notes)
    # the special tokens landed on fairseq's special ids
    assert dictionary.pad() == src.fairseq_ids[0 if src.kind == "bert" else 1].item()


def test_dict_txt_round_trips_to_the_same_dictionary(tmp_path):
    _bert_dir(tmp_path, "BertForMaskedLM")
    src = read_huggingface(tmp_path)
    from etc_fairseq.lift import masked_lm_dictionary

    d = masked_lm_dictionary(write_fairseq_dict(src.symbols, tmp_path / "dict.txt"))
    assert d.symbols == src.symbols == fairseq_dictionary(src.symbols).symbols
    assert d.index("[unused0]") == src.fairseq_ids[1].item()


def test_bad_huggingface_directories(tmp_path):
    _bert_dir(tmp_path, "BertModel")
    (tmp_path / "vocab.txt").write_text("a\nb\n")
    with pytest.raises(LiftError, match=r"vocab.txt: 2 tokens .*'vocab_size' is 60"):
        read_huggingface(tmp_path)
    (tmp_path / "vocab.txt").unlink()
    with pytest.raises(LiftError, match="vocab.txt: missing"):
        read_huggingface(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg, model_type="gpt2")))
    with pytest.raises(LiftError, match="model_type"):
        read_huggingface(tmp_path)


@pytest.mark.parametrize("make,cls_name", [(_bert_dir, "BertModel"), (_roberta_dir, "RobertaForMaskedLM")])
def test_relative_positions_only_discards_the_position_table_and_nothing_else(make, cls_name, tmp_path):
    """The paper's appendix D lift: the source's absolute positions are dropped (named in the report), the
    model takes inputs longer than the source's table, and with the source's own positions zeroed the lifted
    model (radius covering the input, zero relative-label vectors, no global tokens) is the source exactly:
    every other weight was lifted as before."""
    from etc_fairseq.encoder.config import absolute_position_limit

    hf = make(tmp_path, cls_name)
    src = read_huggingface(tmp_path)
    cfg = config_for_arch("etc_tiny", **src.etc_overrides(relative_positions_only=True), local_radius=128)
    assert cfg.index_position_embeddings == 0 and not cfg.use_absolute_positions
    assert absolute_position_limit(cfg) is None
    dictionary = fairseq_dictionary(src.symbols)
    state, report = lift_huggingface_into_etc(src, cfg, build_etc_model(cfg, dictionary, seed=1).state_dict())
    assert not any("position" in k and "rel" not in k for k in state)
    dropped = [k for k, why in report.dropped.items() if "relative positions only" in why]
    assert dropped == (["embeddings.position_embeddings.weight"] if src.kind == "bert"
                       else ["encoder.sentence_encoder.embed_positions.weight"])
    for k in state:
        if ".rel_emb." in k:
            state[k] = torch.zeros_like(state[k])
    model = build_etc_model(cfg, dictionary)
    model.load_state_dict(state, strict=True)
    model.eval()
    with torch.no_grad():  # the source without positions: BERT's rows zeroed; RoBERTa's too (padding row too)
        hf_embeddings = hf.bert.embeddings if hasattr(hf, "bert") else getattr(hf, "roberta", hf).embeddings
        hf_embeddings.position_embeddings.weight.zero_()
    low = 9 if src.kind == "bert" else 4
    hf_ids = torch.randint(low, VOCAB - 1, (2, 30), generator=torch.Generator().manual_seed(2))
    etc_ids = src.fairseq_ids[hf_ids]
    empty = etc_ids.new_zeros(2, 0)
    with torch.no_grad():
        hf_features = hf(input_ids=hf_ids, output_hidden_states=True).hidden_states[-1]
        etc_features, _ = model(etc_ids, features_only=True, global_tokens=empty, global_types=empty)
        # longer than the source's position table (64 rows): runs, relative positions only
        long_ids = src.fairseq_ids[torch.randint(low, VOCAB - 1, (1, 150), generator=torch.Generator().manual_seed(3))]
        long_features, _ = model(long_ids, features_only=True, global_tokens=long_ids.new_zeros(1, 0),
                                 global_types=long_ids.new_zeros(1, 0))
    assert (etc_features - hf_features).abs().max().item() < 1e-4
    assert long_features.shape == (1, 150, SIZES["hidden_size"]) and torch.isfinite(long_features).all()


def test_etc_lift_relative_positions_only_flag(tmp_path, capsys):
    """``etc-lift --relative-positions-only`` (and a BERT's ``--index-position-embeddings 0``, the same request)
    writes a model without absolute positions and says what starts fresh; combined with a flag that asks
    for a position table it is one line on stderr and nothing is written."""
    from etc_fairseq.checkpoint_io import load_checkpoint
    from etc_fairseq.cli.lift import main as lift_main

    src = tmp_path / "bert"
    src.mkdir()
    _bert_dir(src, "BertModel")
    for i, flags in enumerate((["--relative-positions-only"], ["--index-position-embeddings", "0"])):
        out = tmp_path / f"out{i}" / "model.pt"
        assert lift_main([str(src), "--out", str(out), "--arch", "etc_tiny", *flags]) == 0
        stdout = capsys.readouterr().out
        assert "discarded: relative positions only" in stdout and "continue pretraining" in stdout
        ckpt = load_checkpoint(out)
        model_cfg = ckpt["cfg"]["model"]
        assert model_cfg["index_position_embeddings"] == 0 and not model_cfg["use_absolute_positions"]
        assert ckpt["extra_state"]["lifted_from"]["relative_positions_only"] is True
        assert not any("index_positions" in k for k in ckpt["model"])
    out = tmp_path / "clash" / "model.pt"
    rc = lift_main([str(src), "--out", str(out), "--relative-positions-only", "--index-position-embeddings", "64"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1
    assert "--relative-positions-only discards absolute positions, --index-position-embeddings asks for them" in err
    assert not out.parent.exists()
