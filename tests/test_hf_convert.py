"""``etc-lift SOURCE --format hf`` for every source etc-lift reads (Google's released ETC, Hugging Face BERT and
RoBERTa, fairseq RoBERTa) and for fairseq ``etc`` checkpoints, and a Hugging Face ETC directory back to fairseq:

- Google's fixtures (written by the official TensorFlow code) give the official outputs through ``AutoModel``,
  with the structure as named tensors built from the official side-input sources (1e-5);
- ``tokenizer.json`` cuts real Wikipedia text exactly as the source tokenizer does (WordPiece, SentencePiece
  with and without BERT's punctuation pre-split, byte-level BPE with Hugging Face's and with GPT-2's files);
- a fine-tuned fairseq checkpoint goes to Hugging Face with its head and label names, gives the hub's
  predictions, and comes back bit for bit;
- bad input is one line and nothing is written."""
import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import etc_fairseq.hf  # noqa: E402,F401  (registers the Auto classes)
from etc_fairseq.cli.lift import main as lift_main  # noqa: E402
from etc_fairseq.lift.huggingface import SPECIALS  # noqa: E402
from test_from_model import SPM_TEXT, _train_spm  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "official"


def lift(argv, capsys):
    rc = lift_main([str(a) for a in argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.fixture(scope="module")
def wiki_texts(wiki_dump):
    """Real text: the first 40 paragraphs of the Wikipedia sample."""
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    out = []
    for doc in iter_wikipedia_documents(wiki_dump):
        out.extend(doc.paragraphs)
        if len(out) >= 40:
            return out[:40]
    return out


def dictionary_of(directory):
    """The fairseq dictionary's symbols of a written directory (dict.txt + the implied specials)."""
    lines = (Path(directory) / "dict.txt").read_text(encoding="utf-8").splitlines()
    return ["<s>", "<pad>", "</s>", "<unk>"] + [line.rsplit(" ", 1)[0] for line in lines] + ["<mask>"]


def assert_cuts_like_the_source(tokenizer, source, symbols, texts):
    """The Hugging Face tokenizer gives the source tokenizer's pieces, as dictionary ids."""
    index = {s: i for i, s in enumerate(symbols)}
    for text in texts:
        expected = [index.get(p, index["<unk>"]) for p in source.tokenize(text).pieces]
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == expected, text[:80]


# -------------------------------------------------------------------------------------------------------------
# Google's released ETC
# -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["shared", "separate", "kv_shared_preln"])
def test_official_fixture_through_auto_model(name, tmp_path, capsys):
    out = tmp_path / "etc_hf"
    rc, stdout, err = lift([FIXTURES / name, "--format", "hf", "--out", out], capsys)
    assert rc == 0, err
    assert "Hugging Face class EtcModel" in stdout  # official ETC releases no heads
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "dict.txt", "etc_tokenizer.json", "model.safetensors",
                                                     "tokenizer.json", "tokenizer_config.json",
                                                     "vocab_bert_uncased_english.txt"]
    model = transformers.AutoModel.from_pretrained(out).eval()
    assert type(model).__name__ == "EtcModel" and model.config.global_token_ids["sentence"] == 4
    # official ids -> the dictionary the converted token rows follow
    vocab = (FIXTURES / name / "vocab_bert_uncased_english.txt").read_text().split("\n")[:128]
    index = {s: i for i, s in enumerate(dictionary_of(out))}
    to_hf = np.array([index[SPECIALS["bert"].get(t, t)] for t in vocab])
    z = np.load(FIXTURES / name / "official_io.npz")
    tokens, glob = z["token_ids"], z["global_token_ids"]
    real, greal = tokens != 0, glob != 0  # official padding is id 0
    long_break, global_break = torch.tensor(z["long_breakpoints"]).long(), torch.tensor(z["global_breakpoints"]).long()
    with torch.no_grad():
        hf_out = model(
            input_ids=torch.tensor(to_hf[tokens]), attention_mask=torch.tensor(real).long(),
            global_input_ids=torch.tensor(to_hf[glob]), global_attention_mask=torch.tensor(greal).long(),
            global_types=torch.zeros(glob.shape, dtype=torch.long),
            token_type_ids=torch.tensor(z["segment_ids"]).long(),
            global_token_type_ids=torch.tensor(z["global_segment_ids"]).long(),
            # the official side inputs' sources: a sentence's global token, documents cut at breakpoints
            long_segment=torch.tensor(z["sentence_ids"]).long(),
            long_example=long_break.cumsum(1) - long_break, global_example=global_break.cumsum(1) - global_break)
    np.testing.assert_allclose(hf_out.last_hidden_state.numpy()[real], z["long_output"][real], atol=1e-5, rtol=0)
    np.testing.assert_allclose(hf_out.global_last_hidden_state.numpy()[greal], z["global_output"][greal], atol=1e-5, rtol=0)


def test_official_wordpiece_tokenizer_json_cuts_like_the_source(tmp_path, capsys, wiki_texts):
    from etc_fairseq.tokenization import load_tokenizer

    out = tmp_path / "etc_hf"
    assert lift([FIXTURES / "separate", "--format", "hf", "--out", out, "-q"], capsys)[0] == 0
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert len(tok) == 128 and tok.mask_token == "[MASK]" and tok.model_input_names == ["input_ids", "attention_mask",
                                                                                         "token_type_ids"]
    assert_cuts_like_the_source(tok, load_tokenizer(out), dictionary_of(out), wiki_texts)
    ids = tok("the cat")["input_ids"]
    assert ids[0] == tok.cls_token_id == 0 and ids[-1] == tok.sep_token_id == 2  # [CLS] ... [SEP] = <s> ... </s>


@pytest.fixture(scope="module")
def spm_official(tmp_path_factory):
    """CONSTRUCTED (as tests/test_from_model.py's): the official fixture's weights with a SentencePiece
    vocabulary of 128 pieces trained here, no <mask> piece; once as etc_large, once as
    etc_large_split_punctuation (the directory name says so)."""
    spm = pytest.importorskip("sentencepiece")
    root = tmp_path_factory.mktemp("spm_hf")
    plain = root / "etc_spm"
    shutil.copytree(FIXTURES / "separate", plain)
    (plain / "vocab_bert_uncased_english.txt").unlink()
    _train_spm(spm, plain, 128)
    split = root / "etc_spm_split_punctuation"
    shutil.copytree(plain, split)
    return plain, split


@pytest.mark.parametrize("which", [0, 1])
def test_official_sentencepiece_tokenizer_json_cuts_like_the_source(which, spm_official, tmp_path, capsys, wiki_texts):
    from etc_fairseq.tokenization import load_tokenizer

    out = tmp_path / "etc_hf"
    assert lift([spm_official[which], "--format", "hf", "--out", out, "-q"], capsys)[0] == 0
    source = load_tokenizer(out)
    assert source.kind == "sentencepiece" and source.split_punctuation == bool(which)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    symbols = dictionary_of(out)
    assert len(tok) == len(symbols) == 129 and tok.convert_tokens_to_ids("<mask>") == 128  # <mask> is a new row
    assert_cuts_like_the_source(tok, source, symbols, wiki_texts + SPM_TEXT.split("\n") + ["<unused_3> Stagira,x"])


# -------------------------------------------------------------------------------------------------------------
# Hugging Face BERT / RoBERTa, fairseq RoBERTa
# -------------------------------------------------------------------------------------------------------------
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def test_huggingface_bert_to_hf_etc_equals_the_fairseq_lift_and_fills_masks(tmp_path, capsys, wiki_texts):
    from etc_fairseq.models import EtcModel
    from etc_fairseq.tokenization import load_tokenizer

    words = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(
        {w for t in wiki_texts[:5] for w in t.lower().replace(",", " ").replace(".", " ").split()})[:200]
    src = tmp_path / "bert"
    cfg = transformers.BertConfig(vocab_size=len(words), max_position_embeddings=128, **SIZES)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(cfg).eval().save_pretrained(src)
    (src / "vocab.txt").write_text("\n".join(words) + "\n")
    assert lift([src, "--out", tmp_path / "fs" / "model.pt", "-q"], capsys)[0] == 0
    rc, stdout, err = lift([src, "--format", "hf", "--out", tmp_path / "hf"], capsys)
    assert rc == 0, err
    assert "Hugging Face class EtcForMaskedLM" in stdout
    hub = EtcModel.from_pretrained(str(tmp_path / "fs"), checkpoint_file="model.pt").eval()
    mlm = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert_cuts_like_the_source(tok, load_tokenizer(tmp_path / "hf"), dictionary_of(tmp_path / "hf"), wiki_texts)
    text = wiki_texts[0][:300]
    batch = tok([text], return_tensors="pt")
    assert batch["input_ids"][0].tolist() == hub.encode(text).tolist()  # <s> ... </s> = [CLS] ... [SEP]
    with torch.no_grad():
        fs_logits, _ = hub.model(batch["input_ids"], segment_ids=batch["token_type_ids"])
        hf_logits = mlm(**batch).logits
    torch.testing.assert_close(hf_logits, fs_logits, atol=1e-6, rtol=0)
    fill = transformers.pipeline("fill-mask", model=mlm, tokenizer=tok, top_k=3)
    left, right = [w for w in words if w.isalpha()][:2]
    masked = f"{left} {tok.mask_token} {right}"
    answers = fill(masked)
    probs = torch.softmax(mlm(**tok(masked, return_tensors="pt")).logits[0, 2], -1)  # [CLS] left [MASK] right [SEP]
    assert [a["token"] for a in answers] == probs.topk(3).indices.tolist()
    assert [a["sequence"] for a in answers] == [f"{left} {a['token_str']} {right}" for a in answers]
    assert abs(answers[0]["score"] - probs.max().item()) < 1e-5


@pytest.fixture(scope="module")
def gpt2_roberta(gpt2_files, tmp_path_factory):
    """A tiny random Hugging Face RoBERTa with RoBERTa's real vocabulary (GPT-2's BPE; vocab.json in fairseq's
    order, as the released RoBERTa's), and a tiny random fairseq RoBERTa checkpoint over GPT-2 ids with a
    dict.txt of every GPT-2 id (as fairseq's released RoBERTa)."""
    from fairseq.models.roberta import RobertaModel

    from etc_fairseq.lift.huggingface import fairseq_dictionary

    encoder_json, vocab_bpe = gpt2_files
    encoder = json.loads(Path(encoder_json).read_text())
    pieces = [p for p, _ in sorted(encoder.items(), key=lambda kv: kv[1])]
    root = tmp_path_factory.mktemp("gpt2_roberta")
    hf_dir = root / "hf_roberta"
    tokens = ["<s>", "<pad>", "</s>", "<unk>"] + pieces + ["<mask>"]
    cfg = transformers.RobertaConfig(vocab_size=len(tokens), max_position_embeddings=130, type_vocab_size=1,
                                     pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5, **SIZES)
    torch.manual_seed(0)
    transformers.RobertaForMaskedLM(cfg).eval().save_pretrained(hf_dir)
    (hf_dir / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    shutil.copyfile(vocab_bpe, hf_dir / "merges.txt")
    fs = root / "fairseq_roberta"
    fs.mkdir()
    (fs / "dict.txt").write_text("".join(f"{i} 1\n" for i in range(len(pieces))))
    symbols = ["<s>", "<pad>", "</s>", "<unk>"] + [str(i) for i in range(len(pieces))] + ["<mask>"]
    args = argparse.Namespace(arch="roberta_base", encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
                              encoder_attention_heads=4, max_positions=128)
    from fairseq.models.roberta.model import base_architecture

    base_architecture(args)
    task = argparse.Namespace(source_dictionary=fairseq_dictionary(symbols), target_dictionary=None)
    torch.manual_seed(0)
    model = RobertaModel.build_model(args, task)
    torch.save({"args": None, "cfg": {"model": dict(vars(args))}, "model": model.state_dict()}, fs / "model.pt")
    return hf_dir, fs, encoder_json, vocab_bpe


@pytest.mark.parametrize("kind", ["huggingface-roberta", "fairseq-roberta"])
def test_byte_level_bpe_sources(kind, gpt2_roberta, tmp_path, capsys, wiki_texts):
    from etc_fairseq.tokenization import load_tokenizer

    hf_dir, fs, encoder_json, vocab_bpe = gpt2_roberta
    if kind == "huggingface-roberta":
        argv = [hf_dir]
    else:
        argv = [fs / "model.pt", "--arch", "etc_tiny", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
                "--dict", fs / "dict.txt", "--gpt2-encoder-json", encoder_json, "--gpt2-vocab-bpe", vocab_bpe]
    rc, stdout, err = lift(argv + ["--format", "hf", "--out", tmp_path / "hf"], capsys)
    assert rc == 0, err
    assert "EtcForMaskedLM" in stdout and "tokenizer.json" in stdout and "left out" not in stdout
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert_cuts_like_the_source(tok, load_tokenizer(tmp_path / "hf"), dictionary_of(tmp_path / "hf"), wiki_texts)
    ids = tok("Hello world")["input_ids"]
    assert ids[0] == tok.bos_token_id == 0 and ids[-1] == tok.eos_token_id == 2
    model = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf")
    assert model.config.vocab_size == len(tok)


# -------------------------------------------------------------------------------------------------------------
# fairseq etc checkpoints, there and back
# -------------------------------------------------------------------------------------------------------------
@pytest.fixture()
def finetuned(tmp_path, capsys):
    """A fairseq etc checkpoint as fine-tuning writes one for sentence_prediction (CONSTRUCTED: the official
    fixture lifted by etc-lift, a random 3-class head "topic" added, the task's data directory with
    input0/dict.txt and label/dict.txt)."""
    from etc_fairseq.checkpoint_io import load_checkpoint
    from etc_fairseq.models.lifting import save_model_checkpoint

    lifted = tmp_path / "lifted" / "model.pt"
    assert lift([FIXTURES / "separate", "--out", lifted, "-q"], capsys)[0] == 0
    ckpt = load_checkpoint(lifted)
    state = dict(ckpt["model"])
    g = torch.Generator().manual_seed(5)
    for name, shape in (("dense.weight", (32, 32)), ("dense.bias", (32,)), ("out_proj.weight", (3, 32)),
                        ("out_proj.bias", (3,))):
        state[f"classification_heads.topic.{name}"] = torch.randn(shape, generator=g)
    data = tmp_path / "data" / "bin"
    (data / "input0").mkdir(parents=True)
    (data / "label").mkdir()
    shutil.copyfile(lifted.parent / "dict.txt", data / "input0" / "dict.txt")
    (data / "label" / "dict.txt").write_text("science 10\nsport 7\narts 3\n")
    run = tmp_path / "run"
    run.mkdir()
    for name in ("etc_tokenizer.json", "vocab_bert_uncased_english.txt"):
        shutil.copyfile(lifted.parent / name, run / name)
    model_cfg = dict(ckpt["cfg"]["model"], load_checkpoint_heads=True)
    out = save_model_checkpoint(run / "checkpoint_best.pt", state, model_cfg)
    saved = load_checkpoint(out)
    saved["cfg"]["task"] = {"_name": "sentence_prediction", "data": str(data), "num_classes": 3}
    saved["cfg"]["criterion"] = {"_name": "sentence_prediction", "classification_head_name": "topic",
                                 "regression_target": False}
    torch.save(saved, out)
    return out, data


def test_finetuned_fairseq_checkpoint_to_hf_and_back_bit_for_bit(finetuned, tmp_path, capsys):
    from etc_fairseq.checkpoint_io import load_checkpoint
    from etc_fairseq.models import EtcModel

    ckpt_path, data = finetuned
    hf_dir = tmp_path / "hf"
    rc, stdout, err = lift([ckpt_path, "--format", "hf", "--out", hf_dir], capsys)
    assert rc == 0, err
    assert stdout.startswith(f"etc-lift: {ckpt_path} is a fairseq ETC checkpoint\n")
    assert "Hugging Face class EtcForSequenceClassification (head classification_heads.topic)" in stdout
    assert "not in the Hugging Face directory: lm, cpc_head" in stdout
    model = transformers.AutoModelForSequenceClassification.from_pretrained(hf_dir).eval()
    assert model.config.id2label == {0: "science", 1: "sport", 2: "arts"}
    # the hub's prediction with the fairseq checkpoint = the Hugging Face model's
    hub = EtcModel.from_pretrained(str(ckpt_path.parent), checkpoint_file=ckpt_path.name,
                                   data_name_or_path=str(data)).eval()
    proc = etc_fairseq.hf.EtcProcessor.from_pretrained(hf_dir)
    docs = [["the cat sat on the mat.", "it was a cat."], ["the dog."]]
    batch = proc.encode_documents(docs)
    net = hub.encode_documents(docs)
    assert batch["input_ids"].tolist() == net["src_tokens"].tolist()
    assert batch["global_input_ids"].tolist() == net["global_tokens"].tolist()
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, hub.predict("topic", net, return_logits=True), atol=1e-6, rtol=0)
    # and back: every tensor of the encoder and the head, and every model field, as they were
    back = tmp_path / "back" / "model.pt"
    rc, stdout, err = lift([hf_dir, "--out", back], capsys)
    assert rc == 0, err
    assert "head EtcForSequenceClassification.classifier -> classification_heads.topic" in stdout
    before, after = load_checkpoint(ckpt_path), load_checkpoint(back)
    kept = [k for k in before["model"] if k.startswith(("encoder.sentence_encoder.", "classification_heads."))]
    assert kept and all(torch.equal(before["model"][k], after["model"][k]) for k in kept)
    fields = set(etc_fairseq.hf.EtcConfig().encoder_config().__dataclass_fields__) | {"fixed_block_token"}
    assert {k: before["cfg"]["model"][k] for k in fields} == {k: after["cfg"]["model"][k] for k in fields}
    assert (back.parent / "dict.txt").read_text() == (data / "input0" / "dict.txt").read_text()
    assert json.loads((back.parent / "etc_tokenizer.json").read_text())["global_token_pieces"]["sentence"] == "[unused0]"


def test_pretrained_lm_head_goes_there_and_back(tmp_path, capsys):
    from etc_fairseq.checkpoint_io import load_checkpoint

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)]
    src = tmp_path / "bert"
    cfg = transformers.BertConfig(vocab_size=len(words), max_position_embeddings=64, **SIZES)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(cfg).save_pretrained(src)
    (src / "vocab.txt").write_text("\n".join(words) + "\n")
    fs = tmp_path / "fs" / "model.pt"
    assert lift([src, "--out", fs, "-q"], capsys)[0] == 0
    assert lift([fs, "--format", "hf", "--out", tmp_path / "hf", "-q"], capsys)[0] == 0
    assert lift([tmp_path / "hf", "--out", tmp_path / "back" / "model.pt", "-q"], capsys)[0] == 0
    before, after = load_checkpoint(fs)["model"], load_checkpoint(tmp_path / "back" / "model.pt")["model"]
    kept = [k for k in before if k.startswith(("encoder.sentence_encoder.", "encoder.lm_head."))]
    assert all(torch.equal(before[k], after[k]) for k in kept)
    assert torch.equal(after["encoder.lm_head.weight"], after["encoder.sentence_encoder.embed_tokens.weight"])


# -------------------------------------------------------------------------------------------------------------
# bad input
# -------------------------------------------------------------------------------------------------------------
def test_bad_conversions_are_one_line_and_write_nothing(finetuned, tmp_path, capsys):
    ckpt_path, _ = finetuned
    out = tmp_path / "out"

    def refused(argv, words):
        rc, _, err = lift(argv, capsys)
        assert rc == 1 and err.count("\n") == 1 and words in err, err
        assert not out.exists() and not list(tmp_path.glob("out.*"))

    refused([ckpt_path, "--format", "hf", "--out", out, "--head", "task_heads.nq_long_span"],
            "no head 'task_heads.nq_long_span'; it has lm, classification_heads.topic")
    refused([ckpt_path, "--out", out, "--head", "lm"], "--head goes with --format hf")
    refused([ckpt_path, "--out", out / "model.pt"], "already a fairseq ETC checkpoint (--format hf exports it")
    desc = json.loads((ckpt_path.parent / "etc_tokenizer.json").read_text())
    (ckpt_path.parent / "etc_tokenizer.json").write_text(json.dumps(dict(desc, vocab="missing.txt")))
    refused([ckpt_path, "--format", "hf", "--out", out], "missing.txt: WordPiece vocabulary not found")
    (ckpt_path.parent / "etc_tokenizer.json").write_text(json.dumps(desc))
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("keep")
    rc, _, err = lift([ckpt_path, "--format", "hf", "--out", other, "--overwrite"], capsys)
    assert rc == 1 and "is not an ETC Hugging Face directory; --overwrite replaces only those" in err
    assert sorted(p.name for p in other.iterdir()) == ["keep.txt"]
    # an existing Hugging Face ETC directory is replaced only with --overwrite, and then completely
    assert lift([ckpt_path, "--format", "hf", "--out", out, "-q"], capsys)[0] == 0
    rc, _, err = lift([ckpt_path, "--format", "hf", "--out", out], capsys)
    assert rc == 1 and "exists (pass --overwrite to replace it)" in err
    assert lift([ckpt_path, "--format", "hf", "--out", out, "--head", "none", "-q", "--overwrite"], capsys)[0] == 0
    assert json.loads((out / "config.json").read_text())["architectures"] == ["EtcModel"]
    # a Hugging Face directory whose dict.txt is not its vocabulary
    (out / "dict.txt").write_text("a 1\n")
    rc, _, err = lift([out, "--out", tmp_path / "back" / "model.pt"], capsys)
    assert rc == 1 and err.count("\n") == 1 and f"{out / 'dict.txt'}: 6 symbols, {out / 'config.json'} field 'vocab_size' is 128" in err
    assert not (tmp_path / "back").exists()


def test_a_tokenizer_that_is_not_the_models_is_refused(tmp_path, capsys):
    from etc_fairseq.errors import CheckpointLoadError

    out = tmp_path / "hf"
    assert lift([FIXTURES / "shared", "--format", "hf", "--out", out, "-q"], capsys)[0] == 0
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(dict(config, vocab_size=130)))
    with pytest.raises(CheckpointLoadError) as e:
        etc_fairseq.hf.EtcProcessor.from_pretrained(out)
    assert str(e.value) == (f"{out / 'tokenizer.json'}: 128 tokens, but the model's config.json field 'vocab_size' is "
                            "130: not this model's tokenizer")


def test_processor_errors_name_the_document_and_sentence(tmp_path, capsys):
    from etc_fairseq.errors import InputFormatError

    out = tmp_path / "hf"
    assert lift([FIXTURES / "shared", "--format", "hf", "--out", out, "-q"], capsys)[0] == 0
    processor = etc_fairseq.hf.EtcProcessor.from_pretrained(out)
    with pytest.raises(ValueError, match=r"document 1, sentence 1: '  ' encodes to no tokens"):
        processor.encode_documents([["the cat."], ["the dog.", "  "]])
    with pytest.raises(TypeError, match="document 0 is a string; give its sentences as a list of strings"):
        processor.encode_documents(["the cat. the dog."])
    good = {"id": "a", "words": ["the", "cat"], "globals": [{"type": "SENTENCE", "span": [0, 1]}]}
    with pytest.raises(InputFormatError, match=r"records\[1\] \(id 'b'\): field 'globals\[0\]\.type'"):
        processor.encode_records([good, dict(good, id="b", globals=[{"type": "NOPE"}])])


# -------------------------------------------------------------------------------------------------------------
# checkpoints fairseq-train wrote
# -------------------------------------------------------------------------------------------------------------
def test_trained_fairseq_checkpoints_to_hf(etc_tiny_checkpoint, pretrain_data, pretrain_prepared,
                                           etc_tiny_sentence_prediction_checkpoint, classification_prepared,
                                           tmp_path, capsys, wiki_texts):
    """A pre-trained checkpoint (etc_pretraining, SentencePiece found through pretrain.json, a dictionary counted
    from the corpus) and a sentence_prediction classifier, as fairseq-train wrote them: the Hugging Face models
    compute what the hub computes, the tokenizer cuts the corpus as the hub does, and the classes keep their
    names."""
    from etc_fairseq.models import EtcModel

    rc, stdout, err = lift([etc_tiny_checkpoint, "--format", "hf", "--out", tmp_path / "mlm"], capsys)
    assert rc == 0, err
    assert "Hugging Face class EtcForMaskedLM" in stdout and "not in the Hugging Face directory: cpc_head" in stdout
    hub = EtcModel.from_pretrained(str(etc_tiny_checkpoint.parent), checkpoint_file=etc_tiny_checkpoint.name,
                                   data_name_or_path=str(pretrain_data)).eval()
    mlm = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "mlm").eval()
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "mlm")
    processor = etc_fairseq.hf.EtcProcessor.from_pretrained(tmp_path / "mlm")
    # text whose every piece the dictionary has (it was counted from the first articles) is cut as the hub cuts it
    known = [t for t in wiki_texts if all(hub.dictionary.index(p) != hub.dictionary.unk() for p in hub.tokenizer.encode(t))]
    assert len(known) >= 3
    for text in known:
        assert tok(text, add_special_tokens=False)["input_ids"] == [hub.dictionary.index(p) for p in hub.tokenizer.encode(text)]
    docs = [known[0].split(". "), known[1].split(". ")]
    net = hub.encode_documents(docs)
    batch = processor.encode_documents(docs)
    assert torch.equal(batch["input_ids"].masked_fill(batch["attention_mask"].eq(0), 1), net["src_tokens"])
    assert torch.equal(batch["global_input_ids"].masked_fill(batch["global_attention_mask"].eq(0), 1), net["global_tokens"])
    with torch.no_grad():
        long, _ = hub.model(**net, features_only=True)
        out = mlm.etc(**batch)
        keep = batch["attention_mask"].bool()
        torch.testing.assert_close(out.last_hidden_state[keep], long[keep], atol=1e-6, rtol=0)
        logits, _ = hub.model(net["src_tokens"])  # plain input: fixed-block global tokens on both sides
        torch.testing.assert_close(mlm(input_ids=net["src_tokens"]).logits, logits, atol=1e-6, rtol=0)

    rc, stdout, err = lift([etc_tiny_sentence_prediction_checkpoint, "--format", "hf", "--out", tmp_path / "cls"], capsys)
    assert rc == 0, err
    assert "head classification_heads.sentence_classification_head" in stdout
    classifier = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "cls").eval()
    assert list(classifier.config.id2label.values()) == list(classification_prepared.labels)
    data_dir = Path(classification_prepared.bin_dir)
    hub = EtcModel.from_pretrained(str(etc_tiny_sentence_prediction_checkpoint.parent),
                                   checkpoint_file=etc_tiny_sentence_prediction_checkpoint.name,
                                   data_name_or_path=str(data_dir)).eval()
    tokens = hub.to_net_input([hub.encode(wiki_texts[2][:200]), hub.encode(wiki_texts[3][:300])])["src_tokens"]
    with torch.no_grad():
        torch.testing.assert_close(classifier(input_ids=tokens, attention_mask=tokens.ne(1).long()).logits,
                                   hub.predict("sentence_classification_head", tokens, return_logits=True), atol=1e-6, rtol=0)
