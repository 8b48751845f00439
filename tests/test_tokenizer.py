"""The shared word-by-word tokenizer (etc_fairseq/prepare/tokenizer.py) on real text and real vocabularies."""
import pytest

from etc_fairseq.prepare.tokenizer import WordPieceTokenizer, piece_span_of_words


def test_spm_word_by_word_matches_dictionary(pretrain_data):
    import json

    from etc_fairseq.prepare.spm import load_spm

    tok = WordPieceTokenizer.from_pretrain_dir(pretrain_data)
    assert tok.kind == "spm"
    info = json.loads((pretrain_data / "pretrain.json").read_text())
    spm = load_spm(pretrain_data / info["tokenizer_files"]["spm_model"])
    words = "Anarchism is a political philosophy".split()
    ids, word_of_piece = tok.encode_words(words)
    assert len(ids) == len(word_of_piece) and len(ids) >= len(words)
    assert sorted(set(word_of_piece)) == list(range(len(words)))
    # each word's pieces are exactly that word tokenized alone, with the sentencepiece space marker
    for w_i, w in enumerate(words):
        mine = [i for i, wp in zip(ids, word_of_piece) if wp == w_i]
        assert mine == [tok.dictionary.index(p) for p in spm.encode(w, out_type=str)]
    assert tok.dictionary.string(ids).replace(" ", "").replace("\u2581", " ").strip() == " ".join(words)
    assert tok.stats.words == len(words)


def test_gpt2_leading_space_rule(gpt2_files, tmp_path):
    from fairseq.data import Dictionary

    from etc_fairseq.prepare.gpt2 import load_gpt2_bpe

    enc_json, vocab_bpe = gpt2_files
    bpe = load_gpt2_bpe(enc_json, vocab_bpe)
    text = "The Anarchism article"
    d = Dictionary()
    for i in bpe.encode(text):
        d.add_symbol(str(i))
    d.save(str(tmp_path / "dict.txt"))
    tok = WordPieceTokenizer.from_files(tmp_path / "dict.txt", gpt2_encoder_json=enc_json, gpt2_vocab_bpe=vocab_bpe)
    ids, _, word_of_piece = tok.encode_text(text)
    # word by word with RoBERTa's leading-space rule gives the same ids as encoding the whole text
    assert ids == [d.index(str(i)) for i in bpe.encode(text)]
    assert tok.stats.unk == 0
    ids2, _ = tok.encode_words(["zebra"], first_is_start=False)
    assert ids2 and all(i == d.unk_index for i in ids2) and tok.stats.unk == len(ids2)


def test_piece_span_of_words():
    wop = [0, 0, 1, 3, 3, 3, 4]
    assert piece_span_of_words(wop, 0, 0) == (0, 1)
    assert piece_span_of_words(wop, 1, 3) == (2, 5)
    assert piece_span_of_words(wop, 2, 2) is None
    assert piece_span_of_words(wop, 4, 9) == (6, 6)
    assert piece_span_of_words(wop, 5, 6) is None


def test_from_args_errors(tmp_path):
    import argparse

    p = argparse.ArgumentParser()
    WordPieceTokenizer.add_arguments(p)
    with pytest.raises(ValueError, match="--srcdict"):
        WordPieceTokenizer.from_args(p.parse_args([]))
    with pytest.raises(FileNotFoundError, match="pretrain.json"):
        WordPieceTokenizer.from_args(p.parse_args(["--pretrain-dir", str(tmp_path)]))
