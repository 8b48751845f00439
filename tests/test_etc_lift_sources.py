"""``etc-lift`` on the three kinds of source: detection, what is written next to the checkpoint, the written
checkpoint loading without flags, and bad input refused in one line with nothing written."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from etc_fairseq.checkpoint_io import load_checkpoint
from etc_fairseq.cli.lift import main as lift_main
from etc_fairseq.lift.huggingface import SPECIALS
from etc_fairseq.official import OFFICIAL_INPUT_NAMES, forward_official_inputs

FIXTURES = Path(__file__).parent / "fixtures" / "official"


def _run(argv, capsys):
    rc = lift_main([str(a) for a in argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_official_directory_lifts_without_arch_and_reloads_from_pretrained(tmp_path, capsys):
    from etc_fairseq.models import EtcModel

    out = tmp_path / "etc" / "model.pt"
    rc, stdout, err = _run([FIXTURES / "separate", "--out", out], capsys)
    assert rc == 0, err
    assert stdout.splitlines()[0] == f"etc-lift: {FIXTURES / 'separate'} is an official ETC TensorFlow checkpoint directory (etc_config.json)"
    names = sorted(p.name for p in out.parent.iterdir())
    assert names == ["dict.txt", "etc_tokenizer.json", "model.pt", "vocab_bert_uncased_english.txt"]
    tok = json.loads((out.parent / "etc_tokenizer.json").read_text())
    assert tok["type"] == "wordpiece" and tok["global_token_pieces"]["sentence"] == "[unused0]"
    ckpt = load_checkpoint(out)
    model_cfg = ckpt["cfg"]["model"]
    assert model_cfg["relative_bias"] and model_cfg["layer_norm_eps"] == 1e-12 and model_cfg["embedding_size"] == 16

    hub = EtcModel.from_pretrained(str(out.parent), checkpoint_file="model.pt")
    hub.eval()
    # official ids -> the fairseq dictionary the checkpoint's token rows follow
    vocab = (FIXTURES / "separate" / "vocab_bert_uncased_english.txt").read_text().split("\n")[:128]
    # (BERT's special tokens carry fairseq's names in the dictionary: [PAD] is <pad>, [CLS] <s>, ...)
    renamed = [SPECIALS["bert"].get(t, t) for t in vocab]
    to_fairseq = np.array([hub.task.source_dictionary.index(t) for t in renamed])
    assert sorted(to_fairseq) == list(range(128))
    assert tok["source_token_rows"] == to_fairseq.tolist()  # the map etc-lift records, used for official inputs
    z = np.load(FIXTURES / "separate" / "official_io.npz")
    feats = {k: z[k] for k in OFFICIAL_INPUT_NAMES if k in z.files}
    with torch.no_grad():
        long_out, global_out = forward_official_inputs(hub, feats)  # official ids, as the official code made them
    np.testing.assert_allclose(long_out.numpy(), z["long_output"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(global_out.numpy(), z["global_output"], atol=1e-5, rtol=0)


def test_encoder_dir_in_the_core_format(tmp_path, capsys):
    from etc_fairseq.encoder import EtcEncoder

    rc, _, err = _run([FIXTURES / "shared", "--out", tmp_path / "m" / "model.pt", "--encoder-dir", tmp_path / "core", "-q"], capsys)
    assert rc == 0, err
    enc = EtcEncoder.from_pretrained(tmp_path / "core")
    assert enc.cfg.relative_bias and enc.vocab_size == 128


def test_fairseq_roberta_still_needs_arch(tmp_path, capsys):
    f = tmp_path / "roberta.pt"
    torch.save({"model": {}}, f)
    rc, _, err = _run([f, "--out", tmp_path / "o" / "model.pt"], capsys)
    assert rc == 1 and "pass --arch" in err and not (tmp_path / "o").exists()


def _copy(tmp_path, name="shared"):
    target = tmp_path / "src"
    shutil.copytree(FIXTURES / name, target)
    (target / "official_io.npz").unlink()
    return target


def _edit_config(target, **fields):
    cfg = json.loads((target / "etc_config.json").read_text())
    cfg.update(fields)
    (target / "etc_config.json").write_text(json.dumps(cfg))


def _truncate(target):
    data = target / "model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:1000])
    return f"{data}: truncated: variable '"


def _missing_config(target):
    (target / "etc_config.json").unlink()
    return f"{target / 'etc_config.json'}: missing"


def _shape_mismatch(target):
    _edit_config(target, intermediate_size=48)
    return f"{target / 'model.ckpt.index'}: variable 'etc_document_bert/global_local_transformer_layers/feed_forward_layer_0/"


def _unknown_variable(target):
    _edit_config(target, share_feed_forward_params=False)
    return f"{target / 'model.ckpt.index'}: variable 'etc_document_bert/global_local_transformer_layers/feed_forward_layer_0/"


def _wrong_vocab(target):
    vocab = target / "vocab_bert_uncased_english.txt"
    vocab.write_text(vocab.read_text() + "extra\n")
    return f"{vocab}: 129 entries but {target / 'etc_config.json'} field 'vocab_size' is 128"


def _unknown_field(target):
    _edit_config(target, attention_window=3)
    return f"{target / 'etc_config.json'}: field 'attention_window' is not an official EtcConfig field"


@pytest.mark.parametrize("damage", [_truncate, _missing_config, _shape_mismatch, _unknown_variable, _wrong_vocab,
                                    _unknown_field])
def test_bad_official_input_is_one_line_and_writes_nothing(damage, tmp_path, capsys):
    target = _copy(tmp_path)
    expected = damage(target)
    out_dir = tmp_path / "out"
    rc, stdout, err = _run([target, "--out", out_dir / "model.pt", "-q"], capsys)
    assert rc == 1
    assert err.count("\n") == 1 and err.startswith(f"etc-lift: error: {expected}"), err
    assert not out_dir.exists()


def test_existing_output_is_not_replaced(tmp_path, capsys):
    out = tmp_path / "model.pt"
    out.write_text("keep")
    rc, _, err = _run([FIXTURES / "shared", "--out", out, "-q"], capsys)
    assert rc == 1 and "exists (pass --overwrite" in err and out.read_text() == "keep"
    assert not (tmp_path / "dict.txt").exists()


def test_huggingface_directory_lifts_without_arch_and_reloads_from_pretrained(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    from etc_fairseq.models import EtcModel
    from etc_fairseq.tokenization import load_tokenizer

    words = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(26)]
    src = tmp_path / "hf"
    cfg = transformers.BertConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    hf = transformers.BertForMaskedLM(cfg).eval()
    hf.save_pretrained(src)
    (src / "vocab.txt").write_text("\n".join(words) + "\n")
    out = tmp_path / "etc" / "model.pt"
    rc, stdout, err = _run([src, "--out", out], capsys)
    assert rc == 0, err
    assert stdout.splitlines()[0] == f"etc-lift: {src} is a Hugging Face bert directory (config.json)"
    assert sorted(p.name for p in out.parent.iterdir()) == ["dict.txt", "etc_tokenizer.json", "model.pt", "vocab.txt"]
    hub = EtcModel.from_pretrained(str(out.parent), checkpoint_file="model.pt").eval()
    d = hub.task.source_dictionary
    tok = load_tokenizer(out.parent)
    assert tok.global_token_pieces == {}  # BERT was pretrained without global tokens: they stay <s> ([CLS])
    text = "w3 w17 w5 w25"
    ids = [d.bos()] + tok.to_ids(tok.tokenize(text).pieces, d) + [d.eos()]
    hf_ids = [3] + [words.index(w) for w in text.split()] + [4]
    for layer in hub.model.encoder.sentence_encoder.layers:  # the configuration equal to BERT attention
        for table in layer.self_attn.rel_emb.values():
            table.data.zero_()
    empty = torch.zeros(1, 0, dtype=torch.long)
    with torch.no_grad():
        etc_features, _ = hub.model(torch.tensor([ids]), features_only=True, global_tokens=empty, global_types=empty)
        hf_features = hf(input_ids=torch.tensor([hf_ids]), output_hidden_states=True).hidden_states[-1]
    assert (etc_features - hf_features).abs().max().item() < 1e-4

    # the weights file itself instead of its directory: one line saying which directory to pass
    # (safetensors is a dependency: nothing to install)
    rc, _, err = _run([src / "model.safetensors", "--out", tmp_path / "o" / "model.pt"], capsys)
    assert rc == 1 and f"a Hugging Face weights file; pass its directory ({src})" in err
    assert "install" not in err and not (tmp_path / "o").exists()
