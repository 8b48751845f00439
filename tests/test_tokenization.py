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


# ---------------------------------------------------------------------------------------------------------
# BERT's BasicTokenizer pre-split (official etc_large_split_punctuation)
# ---------------------------------------------------------------------------------------------------------

TRICKY_TEXTS = [
    "Hello, World! It's 3.14 -- don't\tstop\u00a0now... (really?) [sic] {x}",
    "Café naïve résumé — “quoted” ‘single’ «guillemets» ¿Qué? ¡Sí! $5 + 3 = 8 ^ ~ | @user #tag 50% &amp;",
    "北京欢迎你 and 東京タワー; 한국어 문장, ﾃｽﾄ 𠀀𠀁 (ext. B) and 豈 compatibility",
    "ctrl\x00chars\x07 here\u200bzero\ufffdwidth\u2028line\u2029para\x85next\r\nwindows\x0bvt",
    "e\u0301 combining A\u030a ring, U.S.A. e.g. a/b c\\d `tick` co-operate 1,000,000.50",
    "   leading and trailing spaces   ",
    "",
]


def _basic_words(text):
    import unicodedata

    from etc_fairseq.tokenization import bert_basic_split

    # Hugging Face's BasicTokenizer NFC-composes words; ours keeps the text's own characters (see its docstring)
    return [unicodedata.normalize("NFC", w) for w, _ in bert_basic_split(text)]


@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_bert_basic_split_equals_transformers_basic_tokenizer(text):
    basic = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy").BasicTokenizer
    assert _basic_words(text) == basic(do_lower_case=False).tokenize(text)


def test_bert_basic_split_equals_transformers_on_random_text():
    import random

    basic = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy").BasicTokenizer(do_lower_case=False)
    pool = [chr(c) for c in [*range(0, 0x180), *range(0x300, 0x310), *range(0x2000, 0x2030), *range(0x3000, 0x3010),
                             *range(0x4E00, 0x4E08), 0xFEFF, 0xFFFD, 0xF900, 0x20000]]
    rng = random.Random(0)
    for _ in range(2000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 24)))
        assert _basic_words(text) == basic.tokenize(text), repr(text)


def test_bert_basic_split_character_positions():
    from etc_fairseq.tokenization import bert_basic_split

    text = "a\x00b, 北京!"
    assert bert_basic_split(text) == [("ab", [0, 2]), (",", [3]), ("北", [5]), ("京", [6]), ("!", [7])]


@pytest.fixture
def split_spm_dir(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(["Hello , World ! It ' s the café , really ?", "北 京 is big . ( yes )"] * 50))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "m"), vocab_size=34,
                                   character_coverage=1.0, model_type="unigram", minloglevel=2)
    (tmp_path / "etc_tokenizer.json").write_text(json.dumps(
        {"type": "sentencepiece", "model": "m.model", "split_punctuation": True}))
    return tmp_path


def test_split_punctuation_cuts_the_words_of_bert_basic_split(split_spm_dir):
    import sentencepiece as spm

    from etc_fairseq.tokenization import bert_basic_split

    sp = spm.SentencePieceProcessor(model_file=str(split_spm_dir / "m.model"))
    tok = load_tokenizer(split_spm_dir)
    assert tok.split_punctuation
    text = "Hello,World! It's\x00 the café,really?北京"
    out = tok.tokenize(text)
    words = [w for w, _ in bert_basic_split(text)]
    assert words == ["Hello", ",", "World", "!", "It", "'", "s", "the", "café", ",", "really", "?", "北", "京"]
    assert out.pieces == sp.encode(" ".join(words), out_type=str)
    # without the pre-split the same model cuts differently ("Hello,World" has no space before the comma)
    assert sentencepiece_tokenizer(split_spm_dir / "m.model").tokenize(text).pieces != out.pieces
    # offsets point into the text as given (the dropped NUL stays outside every piece)
    for piece, (a, b) in zip(out.pieces, out.offsets):
        assert text[a:b] == piece.replace("\u2581", "")
    # word ids for the converters: each piece belongs to the whitespace word it came from
    given = ["Hello,World!", "It's", "café,really?北京"]
    words_out = tok.tokenize_words(given)
    assert words_out.pieces == sp.encode(" ".join(w for g in given for w, _ in bert_basic_split(g)), out_type=str)
    joined = " ".join(given)
    for piece, (a, b), w in zip(words_out.pieces, words_out.offsets, words_out.word_ids):
        assert joined[a:b] == piece.replace("\u2581", "") and joined[a:b] in given[w]
    assert sorted(set(words_out.word_ids)) == [0, 1, 2]


def test_split_punctuation_must_be_a_boolean(split_spm_dir):
    (split_spm_dir / "etc_tokenizer.json").write_text(json.dumps(
        {"type": "sentencepiece", "model": "m.model", "split_punctuation": "yes"}))
    with pytest.raises(TokenizerFileError, match="field 'split_punctuation' = 'yes'; expected true or false"):
        load_tokenizer(split_spm_dir)
