"""``etc-prepare <dataset> --from-model DIR``: fine-tuning data cut with a lifted model's own tokenizer and
``dict.txt``, whose special global tokens carry the ids that model was pretrained with (official ETC:
``[unused0]`` for sentences), recorded in ``prepare.json``."""

import json
from pathlib import Path

import numpy as np
import pytest
from forkserver import run_python

FIXTURES = Path(__file__).parent / "fixtures" / "official"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lifted_official(tmp_path_factory) -> Path:
    """tests/fixtures/official/separate (written by the official TensorFlow code) lifted by etc-lift."""
    from etc_fairseq.models.lifting import lift_source, write_lifted

    out = tmp_path_factory.mktemp("lifted_official") / "model.pt"
    _, lifted = lift_source(FIXTURES / "separate")
    write_lifted(lifted, out)
    return out.parent


def test_from_model_tokenizer_is_the_source_wordpiece_with_pretrained_global_ids(lifted_official):
    from tokenizers import BertWordPieceTokenizer

    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer
    from etc_fairseq.structure.global_tokens import GlobalTokenType as T
    from etc_fairseq.structure.global_tokens import global_token_id

    tok = WordPieceTokenizer.from_model(lifted_official)
    d = tok.dictionary
    assert tok.kind == "wordpiece" and tok.dict_path == lifted_official / "dict.txt"
    vocab = (FIXTURES / "separate" / "vocab_bert_uncased_english.txt").read_text().split("\n")
    # official ids 1..5 are [unused0..4]: sentence, CPC mask, question, candidate, paragraph
    assert tok.global_ids == {"sentence": d.index(vocab[1]), "cpc_mask": d.index(vocab[2]),
                              "question": d.index(vocab[3]), "candidate": d.index(vocab[4]),
                              "paragraph": d.index(vocab[5]), "cls": d.bos()}  # [CLS] (101) is fairseq's <s>
    assert d.index("[unused0]") not in (d.bos(), d.unk())
    # the global tokens the converted model makes itself (fixed blocks) are official ETC's sentence token too
    from etc_fairseq.checkpoint_io import load_checkpoint

    assert load_checkpoint(lifted_official / "model.pt")["cfg"]["model"]["fixed_block_token"] == "[unused0]"
    for t in (T.SENTENCE, T.TITLE, T.FIXED_BLOCK, T.PARAGRAPH):
        assert global_token_id(d, t, role_ids=tok.global_ids) == d.index("[unused0]")
    assert global_token_id(d, T.CPC_MASK, role_ids=tok.global_ids) == d.index("[unused1]")
    assert global_token_id(d, T.CONTEXT, role_ids=tok.global_ids) == d.index("[unused4]")
    assert global_token_id(d, T.CLS, role_ids=tok.global_ids) == d.bos()  # BERT's [CLS] row
    assert global_token_id(d, T.QUESTION, 7, role_ids=tok.global_ids) == 7  # mirrors stay mirrors
    # word by word = BERT uncased WordPiece on each word, ids through dict.txt (upper case lowered)
    words = "The Cat was ON the mat".split()
    ids, wop = tok.encode_words(words)
    bert = BertWordPieceTokenizer(str(FIXTURES / "separate" / "vocab_bert_uncased_english.txt"), lowercase=True)
    expected, expected_wop = [], []
    for w_i, w in enumerate(words):
        pieces = bert.encode(w, add_special_tokens=False).tokens
        expected += [d.index({"[UNK]": "<unk>"}.get(p, p)) for p in pieces]
        expected_wop += [w_i] * len(pieces)
    assert ids == expected and wop == expected_wop
    assert ids[0] == d.index("the") and ids[2] == d.index("was") and ids[3] == d.index("on")


def test_prepare_hotpotqa_from_model_uses_pretrained_sentence_token(lifted_official, tmp_path):
    from etc_fairseq.cli.prepare import main
    from etc_fairseq.finetune.hotpotqa.schema import target_fields
    from etc_fairseq.finetune.hotpotqa.task import HotpotqaDataset
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer
    from etc_fairseq.structure.global_tokens import GlobalTokenType as T

    # CONSTRUCTED record in the official HotpotQA format (text written for this test)
    record = {"_id": "c1", "question": "Was it the cat ?", "answer": "yes", "type": "comparison",
              "supporting_facts": [["Cat", 0]],
              "context": [["Cat", ["The cat was on the mat .", "It is a cat ."]], ["Dog", ["The dog was in it ."]]]}
    data = tmp_path / "train.json"
    data.write_text(json.dumps([record]))
    out = tmp_path / "prepared"
    assert main(["hotpotqa", "--train", str(data), "--out", str(out), "--from-model", str(lifted_official)]) == 0
    d = WordPieceTokenizer.from_model(lifted_official).dictionary
    assert (out / "dict.txt").read_text() == (lifted_official / "dict.txt").read_text()
    info = json.loads((out / "prepare.json").read_text())
    assert info["tokenizer"] == "wordpiece" and info["from_model"] == str(lifted_official)
    # the source model's structure settings, for etc-show (no --arch needed)
    from etc_fairseq.checkpoint_io import load_checkpoint
    from etc_fairseq.data.prepared import recorded_arch_settings

    stored = load_checkpoint(lifted_official / "model.pt")["cfg"]["model"]
    assert stored["local_radius"] == 3  # the official fixture's, not an architecture default
    expected = {"arch": stored["_name"], "local_radius": 3, "relative_pos_max_distance":
                stored["relative_pos_max_distance"], "fixed_block_len": stored["fixed_block_len"]}
    assert {k: info[k] for k in expected} == expected and info["arch_from"] == str(lifted_official / "model.pt")
    assert recorded_arch_settings(out) == (out / "prepare.json", expected)
    sentence_id = d.index("[unused0]")
    assert info["global_token_ids"]["SENTENCE"] == sentence_id and info["global_token_ids"]["CLS"] == d.bos()
    assert info["global_token_ids"]["CONTEXT"] == d.index("[unused4]")
    ex = HotpotqaDataset(out, "train", target_fields(), pad_idx=d.pad())[0]
    types, tokens = np.asarray(ex["global_types"]), np.asarray(ex["global_tokens"])
    assert (types == int(T.SENTENCE)).sum() == 3
    np.testing.assert_array_equal(tokens[types == int(T.SENTENCE)], sentence_id)
    np.testing.assert_array_equal(tokens[types == int(T.TITLE)], sentence_id)
    np.testing.assert_array_equal(tokens[types == int(T.CONTEXT)], d.index("[unused4]"))
    assert tokens[0] == d.bos()
    long_tokens = np.asarray(ex["long_tokens"])
    # "the cat was on the mat ." : "cat" and "mat" are not in the fixture's 128-piece vocabulary
    assert d.index("was") in long_tokens and d.index("on") in long_tokens


def test_from_model_argument_errors(lifted_official, tmp_path):
    import argparse

    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer
    from etc_fairseq.tokenization import TokenizerFileError

    p = argparse.ArgumentParser()
    WordPieceTokenizer.add_arguments(p)
    with pytest.raises(ValueError, match="--from-model already names"):
        WordPieceTokenizer.from_args(p.parse_args(["--from-model", str(lifted_official), "--srcdict", "x"]))
    with pytest.raises(FileNotFoundError, match="dict.txt"):
        WordPieceTokenizer.from_args(p.parse_args(["--from-model", str(tmp_path)]))
    (tmp_path / "dict.txt").write_text("a 1\n")
    with pytest.raises(TokenizerFileError, match="etc_tokenizer.json"):
        WordPieceTokenizer.from_model(tmp_path)


# ---------------------------------------------------------------------------------------------------------
# SentencePiece official checkpoints (etc_large*): etc-lift writes their dict.txt
# ---------------------------------------------------------------------------------------------------------

SPM_TEXT = """Anarchism is a political philosophy that advocates self-governed societies based on voluntary institutions.
Autism is a neurodevelopmental disorder characterized by impaired social interaction and verbal communication.
Alabama is a state in the southeastern region of the United States, bordered by Tennessee to the north.
Abraham Lincoln was the sixteenth President of the United States, serving from March until his assassination.
Aristotle was a Greek philosopher and scientist born in the city of Stagira, Chalkidice, on the northern periphery.
The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat by the door."""


@pytest.fixture(scope="module")
def spm_official_dir(tmp_path_factory) -> Path:
    """CONSTRUCTED: the weights the official TensorFlow code wrote for fixtures/official/separate, with a
    SentencePiece vocabulary trained here (128 pieces, official ETC's SentencePiece layout: <pad> 0, </s> 1,
    <s> 2, <unk> 3, unused pieces from id 4, no <mask>) in place of its WordPiece file."""
    import shutil

    spm = pytest.importorskip("sentencepiece")
    d = tmp_path_factory.mktemp("spm_official") / "etc_spm"
    shutil.copytree(FIXTURES / "separate", d)
    (d / "vocab_bert_uncased_english.txt").unlink()
    _train_spm(spm, d, 128)
    return d


def _train_spm(spm, d: Path, size: int) -> None:
    corpus = d.parent / "corpus.txt"
    corpus.write_text("\n".join([SPM_TEXT] * 20))
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(d / "vocab_gpt_for_etc"), vocab_size=size, model_type="unigram",
        character_coverage=1.0, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        user_defined_symbols=[f"<unused_{i}>" for i in range(40)], minloglevel=2)
    (d / "vocab_gpt_for_etc.vocab").unlink()


def test_lift_sentencepiece_official_writes_dict_and_matches_official_outputs(spm_official_dir, tmp_path, capsys):
    import sentencepiece as spm
    import torch

    from etc_fairseq.cli.lift import main as lift_main
    from etc_fairseq.models import EtcModel
    from etc_fairseq.official import OFFICIAL_INPUT_NAMES, forward_official_inputs
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    out = tmp_path / "lifted" / "model.pt"
    assert lift_main([str(spm_official_dir), "--out", str(out)]) == 0, capsys.readouterr().err
    stdout = capsys.readouterr().out
    assert "has no <mask> piece: dictionary row 128 (<mask>) is new" in stdout
    assert sorted(p.name for p in out.parent.iterdir()) == ["dict.txt", "etc_tokenizer.json", "model.pt",
                                                            "vocab_gpt_for_etc.model"]
    sp = spm.SentencePieceProcessor(model_file=str(spm_official_dir / "vocab_gpt_for_etc.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    hub = EtcModel.from_pretrained(str(out.parent), checkpoint_file="model.pt").eval()
    d = hub.task.source_dictionary
    # fairseq's first four are <s> <pad> </s> <unk>; every other piece keeps its official id; <mask> is new
    assert d.symbols[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and d.symbols[128] == "<mask>" and len(d) == 129
    assert d.symbols[4:128] == pieces[4:]
    to_fairseq = np.array([d.index(p) for p in pieces])
    # fixed-block global tokens the model makes itself: official ETC's sentence token, </s> (official id 1)
    assert hub.model.encoder.sentence_encoder.fixed_block_token_id == d.index("</s>") == to_fairseq[1]
    assert sorted(to_fairseq) == list(range(128))
    z = np.load(spm_official_dir / "official_io.npz")
    feats = {k: z[k] for k in OFFICIAL_INPUT_NAMES if k in z.files}
    assert list(hub.tokenizer.source_token_rows) == to_fairseq.tolist()  # official ids are mapped through it
    with torch.no_grad():
        long_out, global_out = forward_official_inputs(hub, feats)
    np.testing.assert_allclose(long_out.numpy(), z["long_output"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(global_out.numpy(), z["global_output"], atol=1e-5, rtol=0)

    tok = WordPieceTokenizer.from_model(out.parent)
    assert tok.kind == "sentencepiece"
    # official SentencePiece global tokens: sentence </s> (1), CPC mask <s> (2), CLS / question /
    # candidate / paragraph the pieces with ids 40..43
    assert tok.global_ids == {"sentence": d.index("</s>"), "cpc_mask": d.index("<s>"), "cls": d.index(pieces[40]),
                              "question": d.index(pieces[41]), "candidate": d.index(pieces[42]),
                              "paragraph": d.index(pieces[43])}
    words = "The cat sleeps on the mat".split()
    ids, wop = tok.encode_words(words)
    assert ids == [d.index(p) for w in words for p in sp.encode(w, out_type=str)]
    assert wop == [i for i, w in enumerate(words) for _ in sp.encode(w, out_type=str)]


def test_lift_records_split_punctuation_and_every_text_path_pre_splits(spm_official_dir, tmp_path, capsys):
    """etc_large_split_punctuation (detected from its directory name, or --split-punctuation): the converted
    model's tokenizer pre-splits text like BERT's BasicTokenizer, for etc-prepare and the hub alike."""
    import shutil

    import sentencepiece as spm

    from etc_fairseq.cli.lift import main as lift_main
    from etc_fairseq.models import EtcModel
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer
    from etc_fairseq.tokenization import bert_basic_split

    named = tmp_path / "etc_large_split_punctuation"
    shutil.copytree(spm_official_dir, named)
    plain_out, named_out, flag_out = (tmp_path / n / "model.pt" for n in ("plain", "named", "flag"))
    assert lift_main([str(spm_official_dir), "--out", str(plain_out), "-q"]) == 0
    assert lift_main([str(named), "--out", str(named_out)]) == 0
    assert "pre-split as BERT's BasicTokenizer does" in capsys.readouterr().out
    assert lift_main([str(spm_official_dir), "--out", str(flag_out), "--split-punctuation", "-q"]) == 0
    desc = {n: json.loads((tmp_path / n / "etc_tokenizer.json").read_text()) for n in ("plain", "named", "flag")}
    assert "split_punctuation" not in desc["plain"]
    assert desc["named"]["split_punctuation"] is True and desc["flag"]["split_punctuation"] is True

    sp = spm.SentencePieceProcessor(model_file=str(spm_official_dir / "vocab_gpt_for_etc.model"))
    text = "Lincoln,the President(sixteenth)was born;Alabama!"
    split = " ".join(w for w, _ in bert_basic_split(text))
    assert split == "Lincoln , the President ( sixteenth ) was born ; Alabama !"
    tok = WordPieceTokenizer.from_model(named_out.parent)
    d = tok.dictionary
    ids, wop = tok.encode_words(text.split())
    assert ids == [d.index(p) for p in sp.encode(split, out_type=str)]
    assert WordPieceTokenizer.from_model(plain_out.parent).encode_words(text.split())[0] != ids
    assert wop[0] == 0 and wop[-1] == 2 and wop == sorted(wop)
    hub = EtcModel.from_pretrained(str(named_out.parent), checkpoint_file="model.pt")
    assert hub.encode(text, add_special_tokens=False).tolist() == ids


def test_lift_sentencepiece_of_the_wrong_size_is_one_line(spm_official_dir, tmp_path, capsys):
    import shutil

    import sentencepiece as spm

    from etc_fairseq.cli.lift import main as lift_main

    bad = tmp_path / "bad"
    shutil.copytree(spm_official_dir, bad)
    _train_spm(spm, bad, 120)
    assert lift_main([str(bad), "--out", str(tmp_path / "out" / "model.pt")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"etc-lift: error: {bad / 'vocab_gpt_for_etc.model'}: 120 pieces but "
                   f"{bad / 'etc_config.json'} field 'vocab_size' is 128"]
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------
# fairseq-train --finetune-from-model: the model fields stored in the checkpoint, no model flags needed
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["etc", "etc_base", "etc_tiny"])
def test_finetune_from_model_takes_the_stored_model_fields(lifted_official, tmp_path, arch):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from etc_fairseq.checkpoint_io import load_checkpoint

    ckpt = lifted_official / "model.pt"
    argv = [str(tmp_path), "--user-dir", str(REPO / "user_dir"), "--task", "etc_hotpotqa", "--arch", arch,
            "--finetune-from-model", str(ckpt), "--local-radius", "2", "--dropout", "0.25"]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    stored = load_checkpoint(ckpt)["cfg"]["model"]
    assert stored["encoder_embed_dim"] == 32 and stored["embedding_size"] == 16 and stored["relative_bias"]
    for name, value in stored.items():
        if name not in ("_name", "local_radius", "dropout"):
            assert cfg.model[name] == value, name
    # flags on the command line win over the checkpoint
    assert cfg.model.local_radius == 2 and cfg.model.dropout == 0.25 and stored["local_radius"] == 3
    # without --finetune-from-model the architecture's own values
    plain = convert_namespace_to_omegaconf(options.parse_args_and_arch(
        options.get_training_parser(), argv[:7] + ["--local-radius", "2"]))
    assert plain.model.encoder_embed_dim != 32


def test_restore_file_into_a_new_save_dir_builds_the_model_the_checkpoint_holds(lifted_official, tmp_path):
    """A run fine-tuned from a model of its own sizes (the lifted official fixture: width 32, factorized
    embeddings) continues with ``--restore-file RUN/checkpoint_last.pt --save-dir NEW`` and the same command
    line: the model fields come from the restored checkpoint, as they did from --finetune-from-model (fairseq
    reads them only for that option, built an etc_tiny model and stopped with "please ensure that the
    architectures match")."""
    from etc_fairseq.cli.prepare import main

    record = {"_id": "c1", "question": "Was it the cat ?", "answer": "yes", "type": "comparison",  # CONSTRUCTED
              "supporting_facts": [["Cat", 0]],
              "context": [["Cat", ["The cat was on the mat .", "It is a cat ."]], ["Dog", ["The dog was in it ."]]]}
    (tmp_path / "train.json").write_text(json.dumps([dict(record, _id=f"c{i}") for i in range(4)]))
    data = tmp_path / "prepared"
    assert main(["hotpotqa", "--train", str(tmp_path / "train.json"), "--valid", str(tmp_path / "train.json"),
                 "--out", str(data), "--from-model", str(lifted_official)]) == 0
    common = [str(data), "--user-dir", str(REPO / "user_dir"), "--task", "etc_hotpotqa", "--criterion", "etc_hotpotqa",
              "--arch", "etc_tiny", "--optimizer", "adam", "--lr", "1e-4", "--batch-size", "2", "--cpu",
              "--required-batch-size-multiple", "1", "--num-workers", "0", "--no-epoch-checkpoints",
              "--disable-validation"]
    first = run_python(["-m", "fairseq_cli.train", *common, "--finetune-from-model", str(lifted_official / "model.pt"),
                        "--max-update", "1", "--save-dir", str(tmp_path / "run")], cwd=REPO, timeout=600)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    restored = run_python(["-m", "fairseq_cli.train", *common, "--restore-file", str(tmp_path / "run" / "checkpoint_last.pt"),
                           "--max-update", "2", "--save-dir", str(tmp_path / "new")], cwd=REPO, timeout=600)
    log = restored.stdout + restored.stderr
    assert restored.returncode == 0, log[-3000:]
    assert "checkpoint_last.pt (epoch 1 @ 1 updates)" in log and "num_updates 2" in log, log[-3000:]


def test_finetune_from_model_switch_turned_off_with_its_no_flag(lifted_official, tmp_path):
    """A switch the checkpoint has on (hard g2l, relative bias) stays on unless --no-FLAG turns it off."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from etc_fairseq.checkpoint_io import load_checkpoint

    ckpt = lifted_official / "model.pt"
    stored = load_checkpoint(ckpt)["cfg"]["model"]
    assert stored["hard_g2l"] and stored["relative_bias"]
    argv = [str(tmp_path), "--user-dir", str(REPO / "user_dir"), "--task", "etc_hotpotqa", "--arch", "etc_tiny",
            "--finetune-from-model", str(ckpt)]

    def model_cfg(*extra):
        return convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(),
                                                                          argv + list(extra))).model

    assert model_cfg().hard_g2l and model_cfg().relative_bias
    off = model_cfg("--no-hard-g2l")
    assert not off.hard_g2l and off.relative_bias
    assert not model_cfg("--no-relative-bias").relative_bias
    # the plain switch still turns it on where the source has it off
    assert not stored["hard_l2g"] and model_cfg("--hard-l2g").hard_l2g


# ---------------------------------------------------------------------------------------------------------
# etc-prepare pretrain --from-model: continued pretraining data for a converted model
# ---------------------------------------------------------------------------------------------------------


def test_prepare_pretrain_from_model_wordpiece(lifted_official, wiki_dump, tmp_path):
    import torch

    from etc_fairseq.cli.prepare import main
    from etc_fairseq.data.packing import plan_examples
    from etc_fairseq.data.pretraining_corpus import PretrainingCorpus
    from etc_fairseq.data.pretraining_dataset import PretrainingDataset
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer
    from etc_fairseq.structure.global_tokens import GlobalTokenType as T

    out = tmp_path / "pretrain"
    assert main(["pretrain", "--input", str(wiki_dump), "--out", str(out), "--from-model", str(lifted_official),
                 "--max-docs", "4", "--valid-docs", "1", "--max-sentence-pieces", "40"]) == 0
    bin_dir = out / "bin"
    from etc_fairseq.data.prepared import recorded_arch_settings

    assert recorded_arch_settings(bin_dir)[1]["local_radius"] == 3  # out/prepare.json: the source model's
    meta = json.loads((bin_dir / "pretrain.json").read_text())
    assert meta["tokenizer"] == "wordpiece" and meta["tokenizer_files"] == {"model_dir": "../model"}
    assert (bin_dir / "dict.txt").read_text() == (lifted_official / "dict.txt").read_text()
    tok = WordPieceTokenizer.from_pretrain_dir(bin_dir)
    assert tok.kind == "wordpiece" and tok.global_ids == WordPieceTokenizer.from_model(lifted_official).global_ids
    d = tok.dictionary
    assert meta["global_token_ids"]["sentence"] == d.index("[unused0]")
    # the tokenized text is the converted model's WordPiece cut of the raw sentences
    raw = (out / "raw" / "train.txt").read_text().split("\n")
    first = next(line for line in raw if line.strip())
    assert (out / "tok" / "train.txt").read_text().split("\n")[0].split() == tok.source.tokenize(first).pieces
    # pretraining examples: sentence global tokens are [unused0], CPC-masked ones [unused1]
    d.add_symbol("<mask>")
    corpus = PretrainingCorpus.load(bin_dir, "train", dictionary=d)
    examples = plan_examples(corpus.all_doc_sentence_lengths(), 256, 32)
    ds = PretrainingDataset(corpus, examples, d, max_long_len=256, max_global_len=32, cpc_sentence_prob=0.5)
    item = ds[0]
    types, tokens = item["global_types"], item["global_tokens"]
    assert (types == int(T.CPC_MASK)).any() and (types == int(T.SENTENCE)).any()
    assert torch.equal(tokens[types == int(T.SENTENCE)].unique(), torch.tensor([d.index("[unused0]")]))
    assert torch.equal(tokens[types == int(T.CPC_MASK)].unique(), torch.tensor([d.index("[unused1]")]))
    # whole-word masking knows WordPiece continuations
    # whole-word masking: a WordPiece word continues at "##" (the fixture's 128 pieces have none: a small
    # dictionary shows the rule), byte-level BPE words start at "Ġ"
    from fairseq.data import Dictionary

    from etc_fairseq.data.pretraining_corpus import word_start_mask

    assert corpus.tokenizer == "wordpiece" and corpus.word_start_mask[d.index("the")]
    small = Dictionary()
    for sym in ("play", "##ing", "\u0120play", "ing"):
        small.add_symbol(sym)
    ids = [small.index(s) for s in ("play", "##ing", "\u0120play", "ing")]
    assert word_start_mask(small, "wordpiece")[ids].tolist() == [True, False, True, True]
    assert word_start_mask(small, "byte_level_bpe")[ids].tolist() == [False, False, True, False]

    # fairseq-validate on the converted checkpoint itself: no model flags, the task and criterion named on the
    # command line (the checkpoint, never trained, holds only a placeholder task and no criterion)
    import re

    proc = run_python(
        ["-m", "fairseq_cli.validate", str(bin_dir), "--user-dir", str(REPO / "user_dir"),
         "--task", "etc_pretraining", "--criterion", "cpc_mlm", "--path", str(lifted_official / "model.pt"),
         "--max-long-len", "256", "--max-global-len", "32", "--batch-size", "4", "--cpu", "--num-workers", "0"],
        cwd=REPO, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert re.search(r"valid on 'valid' subset \| loss [\d.]+ \| mlm_loss [\d.]+ \| mlm_accuracy [\d.]+ \| cpc_loss", log), log[-2000:]


def test_hub_on_a_lifted_official_directory_uses_its_tokenizer_and_sentence_token(lifted_official):
    import torch

    from etc_fairseq.models import EtcModel
    from etc_fairseq.structure.global_tokens import GlobalTokenType as T

    hub = EtcModel.from_pretrained(str(lifted_official), checkpoint_file="model.pt")
    d = hub.dictionary
    assert hub.tokenizer.kind == "wordpiece"
    ids = hub.encode("The Cat was on it").tolist()
    assert ids == [d.bos(), d.index("the"), d.unk(), d.index("was"), d.index("on"), d.index("it"), d.eos()]
    assert hub.decode(torch.tensor(ids)) == "the <unk> was on it"
    batch = hub.encode_documents([["It was the cat .", "He is on it ."]])
    types, tokens = batch["global_types"][0], batch["global_tokens"][0]
    assert (tokens[types == int(T.SENTENCE)] == d.index("[unused0]")).all() and (types == int(T.SENTENCE)).sum() == 2



def test_prepare_wikihop_nq_openkp_from_model_use_the_official_global_token_ids(lifted_official, tmp_path):
    """Each dataset's special global tokens carry the ids official ETC's own converters give them: sentence
    tokens, NQ's long-answer candidates and OpenKP's VDOM nodes [unused0] (official id 1), WikiHop candidates
    [unused3] (4) and documents [unused4] (5); question tokens mirror their word pieces."""
    from etc_fairseq.cli.prepare import main
    from etc_fairseq.data.structured import StructuredDataset
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer
    from etc_fairseq.structure.global_tokens import GlobalTokenType as T

    d = WordPieceTokenizer.from_model(lifted_official).dictionary
    sentence, candidate, document = (d.index(f"[unused{i}]") for i in (0, 3, 4))
    assert len({sentence, candidate, document, d.bos()}) == 4

    # CONSTRUCTED records (text written for this test) in each dataset's official format
    wikihop = tmp_path / "wikihop.json"
    wikihop.write_text(json.dumps([{"id": "c0", "query": "was it the cat", "candidates": ["a cat", "the dog"],
                                    "supports": ["It was a cat. He is on it.", "The dog was in it."],
                                    "answer": "a cat"}]))
    words = "<P> it was the cat . </P> <P> he is on it . </P>".split()
    nq = tmp_path / "nq.jsonl"
    nq.write_text(json.dumps({
        "example_id": 7, "question_text": "was it the cat", "document_url": "https://en.wikipedia.org",
        "document_text": " ".join(words),
        "long_answer_candidates": [{"start_token": 0, "end_token": 7, "top_level": True},
                                   {"start_token": 7, "end_token": 14, "top_level": True}],
        "annotations": [{"long_answer": {"start_token": 0, "end_token": 7, "candidate_index": 0},
                         "short_answers": [{"start_token": 4, "end_token": 5}], "yes_no_answer": "NONE"}]}) + "\n")
    feature = [0.0, 600.0, 0.0, 40.0, 1.0, 0.0, 0.0, 1.0, 16.0, 0.0] * 2
    nodes = [{"Id": 0, "text": "it was the cat", "start_idx": 0, "end_idx": 4, "feature": feature},
             {"Id": 1, "text": "he is on it", "start_idx": 4, "end_idx": 8, "feature": feature}]
    openkp = tmp_path / "openkp.jsonl"
    openkp.write_text(json.dumps({"url": "http://constructed.example/0", "text": "it was the cat he is on it",
                                  "VDOM": json.dumps(nodes), "KeyPhrases": [["the", "cat"]]}) + "\n")

    expected = {
        "wikihop": {T.CANDIDATE: candidate, T.CONTEXT: document, T.SENTENCE: sentence},
        "nq": {T.CLS: d.bos(), T.PARAGRAPH: sentence},
        "openkp": {T.VDOM_NODE: sentence},
    }
    for name, src in (("wikihop", wikihop), ("nq", nq), ("openkp", openkp)):
        out = tmp_path / f"prepared_{name}"
        extra = ["--doc-stride", "32"] if name == "nq" else []
        assert main([name, "--train", str(src), "--out", str(out), "--from-model", str(lifted_official),
                     "--max-long-len", "64", "--max-global-len", "16", *extra]) == 0, name
        info = json.loads((out / "prepare.json").read_text())
        ex = StructuredDataset(out, "train", [], pad_idx=d.pad())[0]
        types, tokens = np.asarray(ex["global_types"]), np.asarray(ex["global_tokens"])
        for t, token_id in expected[name].items():
            assert (types == int(t)).any(), (name, t)
            np.testing.assert_array_equal(tokens[types == int(t)], token_id, err_msg=f"{name} {t.name}")
            assert info["global_token_ids"][t.name] == token_id, (name, t)
        question = types == int(T.QUESTION)
        if name != "openkp":  # the question's word pieces, mirrored
            assert question.any() and d.index("was") in tokens[question]
