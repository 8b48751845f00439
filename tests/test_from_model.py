"""``etc-prepare <dataset> --from-model DIR``: fine-tuning data cut with a lifted model's own tokenizer and
``dict.txt``, whose special global tokens carry the ids that model was pretrained with (official ETC:
``[unused0]`` for sentences), recorded in ``prepare.json``."""

import json
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "official"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lifted_official(tmp_path_factory) -> Path:
    """tests/fixtures/official/separate (written by the official TensorFlow code) lifted by etc-lift."""
    from etc_fairseq.lift.intake import lift_source, write_lifted

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
                              "paragraph": d.index(vocab[5])}
    assert d.index("[unused0]") not in (d.bos(), d.unk())
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
