"""Tokenizers matching the source model (etc_fairseq.tokenization): exact pieces and word alignment."""

import json

import pytest

from etc_fairseq.tokenization import (
    TokenizerFileError,
    byte_level_bpe_tokenizer,
    load_tokenizer,
    sentencepiece_tokenizer,
    wordpiece_tokenizer,
)

BERT_VOCAB = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
              "the", "cafe", "is", "open", "##s", "un", "##believ", "##able", ",", "."]


@pytest.fixture
def bert_dir(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(BERT_VOCAB) + "\n")
    (tmp_path / "etc_tokenizer.json").write_text(json.dumps(
        {"type": "wordpiece", "vocab": "vocab.txt", "lowercase": True, "global_token_pieces": {"sentence": "[unused0]"}}))
    return tmp_path


def test_wordpiece_uncased_lowercases_strips_accents_and_aligns_words(bert_dir):
    tok = load_tokenizer(bert_dir)
    out = tok.tokenize_words(["The", "Café", "opens,", "Unbelievable."])
    assert out.pieces == ["the", "cafe", "open", "##s", ",", "un", "##believ", "##able", "."]
    assert out.word_ids == [0, 1, 2, 2, 2, 3, 3, 3, 3]
    assert out.word_starts() == [True, True, True, False, False, True, False, False, False]
    text = "The Café opens, Unbelievable."
    assert [text[a:b] for a, b in out.offsets] == ["The", "Café", "open", "s", ",", "Un", "believ", "able", "."]
    # special tokens carry fairseq's names in the lifted dictionary
    assert wordpiece_tokenizer(bert_dir / "vocab.txt").tokenize("xyz").pieces == ["<unk>"]


def test_global_token_id_is_the_pretrained_one(bert_dir):
    from etc_fairseq.lift.huggingface import fairseq_dictionary, fairseq_order

    symbols, _ = fairseq_order(BERT_VOCAB, "bert", "vocab.txt")
    d = fairseq_dictionary(symbols)
    tok = load_tokenizer(bert_dir)
    assert tok.global_token_id("sentence", d) == d.index("[unused0]")
    assert d.symbols[tok.global_token_id("sentence", d)] == "[unused0]"
    with pytest.raises(KeyError, match="question"):
        tok.global_token_id("question", d)


def test_byte_level_bpe_offsets_and_words(tmp_path):
    vocab = {"a": 0, "b": 1, "\u0120": 2, "ab": 3, "\u0120ab": 4, "\u0120a": 5}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n\u0120 ab\n\u0120 a\n")
    tok = byte_level_bpe_tokenizer(tmp_path / "vocab.json", tmp_path / "merges.txt")
    out = tok.tokenize_words(["ab", "ab", "a"])
    assert out.pieces == ["ab", "\u0120ab", "\u0120a"]
    assert out.word_ids == [0, 1, 2]
    ids = byte_level_bpe_tokenizer(tmp_path / "vocab.json", tmp_path / "merges.txt", gpt2_ids=True)
    assert ids.tokenize("ab ab").pieces == ["3", "4"]  # fairseq RoBERTa's dict.txt spelling


def test_sentencepiece_words_and_character_offsets(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(["the café is open", "unbelievable things happen", "open the door"] * 50))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "m"), vocab_size=25,
                                   character_coverage=1.0, model_type="unigram")
    tok = sentencepiece_tokenizer(tmp_path / "m.model")
    words = ["café", "open", "the"]
    out = tok.tokenize_words(words)
    text = " ".join(words)
    assert "".join(out.pieces).replace("\u2581", " ").strip() == text
    for piece, (a, b), w in zip(out.pieces, out.offsets, out.word_ids):
        surface = text[a:b].strip()
        assert surface in words[w] and (surface or piece == "\u2581")  # a lone word marker covers no text
        assert piece.replace("\u2581", "") == surface
    assert sorted(set(out.word_ids)) == [0, 1, 2]


def test_bad_description(tmp_path):
    with pytest.raises(TokenizerFileError, match="etc_tokenizer.json: missing"):
        load_tokenizer(tmp_path)
    (tmp_path / "etc_tokenizer.json").write_text(json.dumps({"type": "morse"}))
    with pytest.raises(TokenizerFileError, match="field 'type' = 'morse'"):
        load_tokenizer(tmp_path)
