"""Lifting Hugging Face BERT and RoBERTa directories into ETC (``etc_fairseq.lift.huggingface``).

Randomly initialised ``transformers`` models (no download) are saved with ``save_pretrained``, lifted, and
the lifted ETC model, with a radius covering the input, zero relative-label vectors and an empty global
input (the configuration in which ETC's attention is the source's full attention), must give the source
model's features and MLM logits."""

import json
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from etc_fairseq.lift import LiftError  # noqa: E402
from etc_fairseq.models.lifting import build_etc_model  # noqa: E402
from etc_fairseq.lift.huggingface import (  # noqa: E402
    GLOBAL_POSITIONS_NOTE,
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
    if src.kind == "bert":  # BERT's positions: the long table is the source's, the global one starts at zero
        enc = "encoder.sentence_encoder."
        assert torch.equal(state[enc + "embed_long_index_positions.weight"],
                           hf.state_dict()[("" if cls_name == "BertModel" else "bert.") + "embeddings.position_embeddings.weight"])
        assert not state[enc + "embed_global_index_positions.weight"].any()
        assert enc + "embed_global_index_positions.weight" not in report.fresh
        assert GLOBAL_POSITIONS_NOTE in report.notes


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


def _lift(argv, capsys):
    from etc_fairseq.cli.lift import main as lift_main

    capsys.readouterr()  # what building the source printed (transformers' progress bars)
    rc = lift_main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _edit_config(src, **changes):
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(changes)
    (src / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("field, value, expected", [
    ("attention_probs_dropout_prob", -0.5, "a probability in [0, 1)"),
    ("hidden_dropout_prob", float("nan"), "a probability in [0, 1)"),
    ("hidden_act", ["gelu"], "one of"),
    ("model_type", ["bert"], "one of"),
    ("layer_norm_eps", None, "a positive finite number"),
    ("hidden_size", 10 ** 7, "has shape"),
    ("num_hidden_layers", 100000, "missing"),
])
def test_a_source_config_that_cannot_work_is_one_line_and_nothing_is_written(field, value, expected, tmp_path, capsys):
    src = tmp_path / "bert"
    src.mkdir()
    _bert_dir(src, "BertModel")
    _edit_config(src, **{field: value})
    out = tmp_path / "out" / "model.pt"
    rc, _, err = _lift([src, "--out", out, "--arch", "etc_tiny"], capsys)
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(src) in err and expected in err and (field in err or expected in ("has shape", "missing"))
    assert not out.parent.exists()


def test_weights_that_do_not_fit_the_config_or_are_not_floats_are_refused_by_name(tmp_path, capsys):
    """A word-embedding table of 100 rows under a vocab_size of 60 used to lift to 60 rows without a word, and
    integer or boolean weights were cast to float."""
    from safetensors.torch import load_file, save_file

    src = tmp_path / "bert"
    src.mkdir()
    _bert_dir(src, "BertModel")
    weights = load_file(str(src / "model.safetensors"))
    key = next(k for k in weights if k.endswith("word_embeddings.weight"))
    bigger = dict(weights, **{key: torch.cat([weights[key], torch.zeros(40, weights[key].shape[1])])})
    save_file(bigger, str(src / "model.safetensors"))
    rc, _, err = _lift([src, "--out", tmp_path / "a" / "model.pt", "--arch", "etc_tiny"], capsys)
    assert rc == 1 and f"{key!r} has shape (100, 32)" in err and "vocab_size 60" in err
    key = next(k for k in weights if k.endswith("attention.self.query.weight"))
    save_file(dict(weights, **{key: weights[key].to(torch.int64)}), str(src / "model.safetensors"))
    rc, _, err = _lift([src, "--out", tmp_path / "b" / "model.pt", "--arch", "etc_tiny"], capsys)
    assert rc == 1 and f"{key!r} is int64; a weight is floating point" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_no_output_may_land_on_or_inside_an_input(tmp_path, capsys):
    """etc-lift HF_DIR --encoder-dir HF_DIR replaced the source's config.json and model.safetensors; an
    --encoder-dir that is a file failed after model.pt was written."""
    src = tmp_path / "bert"
    src.mkdir()
    _bert_dir(src, "BertModel")
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    out = tmp_path / "out" / "model.pt"
    for encoder_dir in (src, src / "." , tmp_path / "link"):
        if encoder_dir.name == "link":
            encoder_dir.symlink_to(src)
        rc, _, err = _lift([src, "--out", out, "--arch", "etc_tiny", "--encoder-dir", encoder_dir], capsys)
        assert rc == 1 and "--encoder-dir" in err and "input" in err, err
    (tmp_path / "afile").write_text("x")
    rc, _, err = _lift([src, "--out", out, "--arch", "etc_tiny", "--encoder-dir", tmp_path / "afile"], capsys)
    assert rc == 1 and "is a file" in err
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before and not out.parent.exists()


def test_outputs_appear_all_at_once_and_a_killed_run_is_cleaned_by_the_next(tmp_path, capsys):
    src = tmp_path / "bert"
    src.mkdir()
    _bert_dir(src, "BertForMaskedLM")
    vocab = (src / "vocab.txt").read_text().split("\n")
    (src / "vocab.txt").write_text("\n".join(vocab[:20] + ["has space"] + vocab[21:]))  # a symbol fairseq cannot hold
    out = tmp_path / "out" / "model.pt"
    rc, _, err = _lift([src, "--out", out, "--arch", "etc_tiny", "--encoder-dir", tmp_path / "core"], capsys)
    assert rc == 1 and err.count("\n") == 1
    assert not out.parent.exists() and not (tmp_path / "core").exists()
    (src / "vocab.txt").write_text("\n".join(vocab))
    out.parent.mkdir()
    (out.parent / ".etc-lift-staging-killed").mkdir()  # what a run killed while writing leaves
    rc, stdout, err = _lift([src, "--out", out, "--arch", "etc_tiny", "--encoder-dir", tmp_path / "core"], capsys)
    assert rc == 0, err
    assert sorted(p.name for p in out.parent.iterdir()) == ["dict.txt", "etc_tokenizer.json", "model.pt", "vocab.txt"]
    assert {"config.json", "model.safetensors", "etc_tokenizer.json", "vocab.txt"} <= {p.name for p in (tmp_path / "core").iterdir()}
    # the summary names the source as what it is, and the suggested commands are complete
    assert "from 40 Hugging Face BERT tensors" in stdout or "Hugging Face BERT tensors" in stdout
    assert "--task etc_pretraining --criterion cpc_mlm" in stdout and "--task etc_structured --criterion etc_structured" in stdout


def test_fill_mask_warns_when_the_lm_head_was_not_lifted(tmp_path, caplog):
    from etc_fairseq.cli.lift import main as lift_main
    from etc_fairseq.models import EtcModel

    for cls_name, warned in (("BertModel", True), ("BertForMaskedLM", False)):
        src = tmp_path / cls_name
        src.mkdir()
        _bert_dir(src, cls_name)
        out = tmp_path / f"{cls_name}-etc" / "model.pt"
        assert lift_main([str(src), "--out", str(out), "--arch", "etc_tiny", "-q"]) == 0
        hub = EtcModel.from_pretrained(out.parent)
        caplog.clear()
        with caplog.at_level("WARNING", logger="etc_fairseq.hub"):
            hub.fill_mask("w1 <mask> w3", topk=2)
        assert ("LM head is freshly initialised" in caplog.text) is warned


def test_g2g_bias_table_shifts_every_g2g_score_by_the_logit():
    """``--g2g-bias``'s table: ``logit * sqrt(head_dim)`` on the g2g rows, 0 on the others, so that through the
    attention kernels (which scale a label bias like ``q . e``) every global key's odds against every long key
    change by exactly ``exp(logit)``. The values are one-hot, so the outputs are the attention probabilities."""
    from etc_fairseq.attention import global_query_attention
    from etc_fairseq.lift.global_side import g2g_bias_table
    from etc_fairseq.structure import RelativeLabelVocab

    vocab = RelativeLabelVocab(1)  # ids 0-2 positions, 3 belongs, 4 not_belongs, 5-7 g2g structure labels
    assert torch.equal(g2g_bias_table(vocab.g2g_ids(), vocab.size, 2, 4, -1.5),
                       torch.tensor([[-3.0] * 2] * 3 + [[0.0] * 2] * 2 + [[-3.0] * 2] * 3))
    G, L, H = 2, 3, 2
    D = G + L
    gen = torch.Generator().manual_seed(0)
    q, kg, kl = (torch.randn(1, H, n, D, generator=gen) for n in (G, G, L))
    eye = torch.eye(D).expand(1, H, D, D)
    args = dict(g2g_mask=torch.ones(1, G, G, dtype=torch.bool), g2l_mask=torch.ones(1, G, L, dtype=torch.bool),
                g2g_rel=torch.tensor([[[0, 1], [2, 0]]]), g2l_rel=torch.tensor([[[3, 4, 4], [4, 3, 4]]]),
                rel_emb=torch.zeros(vocab.size, H, D))
    for impl in ("blocked", "dense"):
        plain = global_query_attention(q, kg, eye[:, :, :G], kl, eye[:, :, G:], impl=impl, **args)
        biased = global_query_attention(q, kg, eye[:, :, :G], kl, eye[:, :, G:], impl=impl, **args,
                                        rel_bias=g2g_bias_table(vocab.g2g_ids(), vocab.size, H, D, -1.5))
        assert torch.allclose(plain.sum(-1), torch.ones(1, H, G)) and torch.allclose(biased.sum(-1), torch.ones(1, H, G))
        odds = (biased[..., :G] / biased[..., G:].sum(-1, keepdim=True)) / (plain[..., :G] / plain[..., G:].sum(-1, keepdim=True))
        assert torch.allclose(odds, torch.full_like(odds, math.exp(-1.5)), rtol=1e-4), impl


def test_etc_lift_global_side_start(tmp_path, capsys):
    """``etc-lift --g2g-bias -2 --global-token-piece [SEP]``: the model turns on ``relative_bias`` and holds the
    table in every layer's global side only (the long side's starts at 0), the summary tokens start from
    ``[SEP]`` (``etc_tokenizer.json``, so ``etc-prepare --from-model`` gives them ``</s>``'s id, CLS keeps
    ``<s>``), the checkpoint says so; apart from the bias tables, the weights are those of the plain lift.
    Bad values are one line and nothing is written."""
    from etc_fairseq.checkpoint_io import load_checkpoint
    from etc_fairseq.lift.global_side import g2g_bias_table
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer
    from etc_fairseq.structure import RelativeLabelVocab

    src = tmp_path / "bert"
    src.mkdir()
    _bert_dir(src, "BertModel")
    plain, fixed = tmp_path / "plain" / "model.pt", tmp_path / "fixed" / "model.pt"
    assert _lift([src, "--out", plain, "--arch", "etc_tiny", "--relative-positions-only"], capsys)[0] == 0
    rc, stdout, _ = _lift([src, "--out", fixed, "--arch", "etc_tiny", "--relative-positions-only", "--g2g-bias", "-2",
                           "--global-token-piece", "[SEP]", "--global-token-piece", "cls=[CLS]"], capsys)
    assert rc == 0 and "g2g bias -2" in stdout and "sentence: [SEP]" in stdout
    a, b = load_checkpoint(plain), load_checkpoint(fixed)
    cfg = b["cfg"]["model"]
    assert cfg["relative_bias"] is True and not a["cfg"]["model"]["relative_bias"]
    assert b["extra_state"]["lifted_from"]["g2g_bias"] == -2.0
    assert b["extra_state"]["lifted_from"]["global_token_pieces"]["sentence"] == "[SEP]"
    vocab = RelativeLabelVocab(cfg["relative_pos_max_distance"], cfg["relative_structure_labels"].split(","))
    heads = cfg["encoder_attention_heads"]
    expected = g2g_bias_table(vocab.g2g_ids(), vocab.size, heads, cfg["encoder_embed_dim"] // heads, -2.0)
    biases = sorted(k for k in b["model"] if ".rel_bias." in k)
    assert len(biases) == 2 * cfg["encoder_layers"]
    for k in biases:
        assert torch.equal(b["model"][k], expected if k.endswith(".global") else torch.zeros_like(expected)), k
    assert sorted(set(b["model"]) - set(biases)) == sorted(a["model"])
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    pieces = json.loads((fixed.parent / "etc_tokenizer.json").read_text())["global_token_pieces"]
    assert pieces == {"candidate": "[SEP]", "cls": "[CLS]", "cpc_mask": "[SEP]", "paragraph": "[SEP]", "sentence": "[SEP]"}
    tok = WordPieceTokenizer.from_model(fixed.parent)
    assert tok.global_ids["sentence"] == tok.dictionary.index("</s>") and tok.global_ids["cls"] == tok.dictionary.bos()
    for flags, message in ((["--global-token-piece", "[nope]"], "=[nope]: not in the vocabulary"),
                           (["--global-token-piece", "title=[SEP]"], "unknown role 'title'"),
                           (["--g2g-bias", "-2", "--shared-relative-embeddings"], "--g2g-bias needs a relative bias table per query side")):
        out = tmp_path / "bad" / "model.pt"
        rc, _, err = _lift([src, "--out", out, "--arch", "etc_tiny", *flags], capsys)
        assert rc == 1 and err.count("\n") == 1 and message in err, err
        assert not out.parent.exists()
