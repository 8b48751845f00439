"""Tests for ``etc-prepare pretrain`` (etc_fairseq.prepare.pretrain / sentences / gpt2) and its reader
(etc_fairseq.data.pretraining_corpus), end to end on the real Wikipedia sample with sentencepiece and with
GPT-2 BPE, plus the sentence splitter on hard cases."""
import json
import shutil
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from etc_fairseq.cli.prepare import main as cli_main
from etc_fairseq.data.packing import plan_examples
from etc_fairseq.data.pretraining_corpus import PretrainingCorpus, sentence_word_starts, word_start_mask
from etc_fairseq.prepare.documents import Document, normalize_whitespace
from etc_fairseq.prepare.gpt2 import GPT2_MEMBERS, load_gpt2_bpe, wrap_tokens
from etc_fairseq.prepare.pretrain import SentenceStats, iter_sentence_documents, strip_document_breaks
from etc_fairseq.prepare.sentences import split_sentences

# ------------------------------------------------------------------------------------------------------
# hand-written documents mixed into the real dump
# ------------------------------------------------------------------------------------------------------

DOC_SHORT = [  # 3 sentences: dropped with --min-sentences 7 (long enough to pass the character filters)
    "The first short document has a single paragraph that goes on for a while. It only has three sentences "
    "in total, which is fewer than the paper asks for. That is why the pretraining preparation drops it."
]
DOC_HARD = [  # 8 sentences with abbreviations, decimals, "?" and "!"
    "Dr. Jane Smith moved to Washington, D.C. in 1990. She worked for the U.S. Department of State for 12.5 "
    "years. Her salary rose by 3.5% per year.",
    "In 2003 she left government. She joined a small firm in St. Louis. The firm, Acme Inc., made anvils. "
    "Was she happy there? Nobody knows!",
]
DOC_HARD_SENTENCES = [
    "Dr. Jane Smith moved to Washington, D.C. in 1990.",
    "She worked for the U.S. Department of State for 12.5 years.",
    "Her salary rose by 3.5% per year.",
    "In 2003 she left government.",
    "She joined a small firm in St. Louis.",
    "The firm, Acme Inc., made anvils.",
    "Was she happy there?",
    "Nobody knows!",
]
ANIMALS = (
    "otters, beavers, badgers, foxes, wolves, herons, kingfishers, salmon, trout, eels, frogs, toads, newts, "
    "dragonflies, mayflies, water voles, swans, geese, mallards, grebes, moorhens, coots, pike, perch, minnows, "
    "crayfish, mussels, snails, leeches and water beetles"
)
LONG_SENTENCE = f"Along the river one may see {ANIMALS}, all of them living together in the reeds, the mud and the water."
DOC_LONG = [  # 7 sentences (exactly the minimum: kept), one of them long (about 90 GPT-2 tokens)
    "The river rises in the hills. It flows north for about forty miles. Several towns grew up on its banks.",
    LONG_SENTENCE + " The water is clean today. Fishing is popular in summer. Boats are not allowed on the upper "
    "part of the river.",
]


def read_bert_layout(path):
    """A BERT-layout file as a list of documents, each a list of its lines."""
    docs, cur = [], []
    for line in Path(path).read_text(encoding="utf-8").split("\n"):
        if line.strip():
            cur.append(line)
        elif cur:
            docs.append(cur)
            cur = []
    if cur:
        docs.append(cur)
    return docs


@pytest.fixture(scope="module")
def extra_text(tmp_path_factory):
    path = tmp_path_factory.mktemp("pretrain_inputs") / "extra.txt"
    path.write_text("\n\n".join("\n".join(d) for d in (DOC_SHORT, DOC_HARD, DOC_LONG)) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------------
# the sentence splitter
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The U.S. Army was founded in 1775. It fought in many wars.", ["The U.S. Army was founded in 1775.", "It fought in many wars."]),
        ("Dr. Smith arrived at 3 p.m. on Monday. He left early.", ["Dr. Smith arrived at 3 p.m. on Monday.", "He left early."]),
        ("The value of pi is about 3.14159. Euler's number is 2.718.", ["The value of pi is about 3.14159.", "Euler's number is 2.718."]),
        ("See e.g. the works of Aristotle, i.e. the Organon. They were influential.", ["See e.g. the works of Aristotle, i.e. the Organon.", "They were influential."]),
        ("Version 2.0 was released in Jan. 2005 and cost $4.99. Sales grew.", ["Version 2.0 was released in Jan. 2005 and cost $4.99.", "Sales grew."]),
        ("Mr. and Mrs. Brown met Prof. Lee at 10 a.m. on Friday. They talked.", ["Mr. and Mrs. Brown met Prof. Lee at 10 a.m. on Friday.", "They talked."]),
        ("Was it true? Nobody knew! The case was closed.", ["Was it true?", "Nobody knew!", "The case was closed."]),
        ("  A  first sentence.\n\nSecond\tone.  ", ["A first sentence.", "Second one."]),
        ("No final punctuation here", ["No final punctuation here"]),
        ("", []),
        (" \n ", []),
    ],
)
def test_split_sentences_hard_cases(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_on_the_real_sample_loses_no_text(wiki_dump):
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    n_par = n_sent = 0
    for i, doc in enumerate(iter_wikipedia_documents(wiki_dump)):
        if i == 10:
            break
        for p in doc.paragraphs:
            sents = split_sentences(p)
            # no character is lost or added (boundaries need not fall on a space: '... variations'." Illegalism')
            assert "".join(sents).replace(" ", "") == normalize_whitespace(p).replace(" ", "")
            assert all(s and s == s.strip() for s in sents)
            n_par += 1
            n_sent += len(sents)
    assert n_sent > 2 * n_par  # real paragraphs hold several sentences


# ------------------------------------------------------------------------------------------------------
# building blocks
# ------------------------------------------------------------------------------------------------------


def test_iter_sentence_documents_filters_and_counts():
    docs = [Document("short", DOC_SHORT), Document("hard", DOC_HARD), Document("long", DOC_LONG), Document("x", DOC_HARD)]
    stats = SentenceStats()
    out = list(iter_sentence_documents(docs, min_sentences=7, max_docs=2, stats=stats))
    assert [d.title for d in out] == ["hard", "long"]
    assert out[0].paragraphs == DOC_HARD_SENTENCES
    assert LONG_SENTENCE in out[1].paragraphs and len(out[1].paragraphs) == 7
    assert stats == SentenceStats(docs_read=3, docs_kept=2, docs_dropped=1, sentences_kept=15, sentences_dropped=3)
    assert [d.title for d in iter_sentence_documents(docs, min_sentences=8)] == ["hard", "x"]
    assert [d.title for d in iter_sentence_documents(docs, min_sentences=9)] == []


def test_strip_document_breaks(tmp_path):
    src = tmp_path / "tok.txt"
    src.write_text("a b\nc\n\nd\n\n\ne f g\nh\ni\n", encoding="utf-8")
    offsets = strip_document_breaks(src, tmp_path / "items.txt")
    assert offsets.tolist() == [0, 2, 3, 6] and offsets.dtype == np.int64
    assert (tmp_path / "items.txt").read_text() == "a b\nc\nd\ne f g\nh\ni\n"


def test_wrap_tokens_cuts_at_word_starts():
    toks = list(range(10))
    starts = [True, False, False, True, False, True, False, False, False, False]
    # back off to the last word start in the second half of a chunk (3), else cut hard (7)
    assert wrap_tokens(toks, starts, 4) == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert wrap_tokens(toks, starts, 0) == [toks]
    assert wrap_tokens(toks, [True] + [False] * 9, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # one long word


# ------------------------------------------------------------------------------------------------------
# word starts
# ------------------------------------------------------------------------------------------------------


def _dictionary(symbols):
    from fairseq.data import Dictionary

    d = Dictionary()
    for s in symbols:
        d.add_symbol(s)
    return d


def test_word_start_mask_sentencepiece_exact():
    d = _dictionary(["\u2581the", "s", "\u2581cat", "-", "\u2581", "madeupword0000", "<mask>"])
    # <s> <pad> </s> <unk> are specials
    assert word_start_mask(d, "spm").tolist() == [True] * 4 + [True, False, True, False, True, True, True]
    assert sentence_word_starts([5, 6, 4], word_start_mask(d, "spm")).tolist() == [True, True, True]
    assert sentence_word_starts([5, 7, 5], word_start_mask(d, "spm")).tolist() == [True, False, False]
    assert sentence_word_starts([], word_start_mask(d, "spm")).tolist() == []
    with pytest.raises(ValueError, match="tokenizer_kind"):
        word_start_mask(d, "bpe")


def test_word_start_mask_gpt2_exact(gpt2_files):
    encoder_json, vocab_bpe = gpt2_files
    enc = load_gpt2_bpe(encoder_json, vocab_bpe)
    the, s, cat = enc.encode(" the") + enc.encode("s") + enc.encode(" cat")
    assert (the, s, cat) == (262, 82, 3797)  # GPT-2's ids
    d = _dictionary([str(the), str(s), str(cat), "madeupword0000", "<mask>"])
    assert word_start_mask(d, "gpt2", encoder_json).tolist() == [True] * 4 + [True, False, True, True, True]
    # the first token of a sentence is a word start although it has no leading space
    first = enc.encode("Cats")
    assert not word_start_mask(_dictionary([str(first[0])]), "gpt2", encoder_json)[4]
    with pytest.raises(ValueError, match="gpt2_encoder_json"):
        word_start_mask(d, "gpt2")


def test_word_start_mask_matches_fairseq(pretrain_prepared, pretrain_gpt2_prepared, gpt2_files):
    """fairseq's get_whole_word_mask is the reference (for dictionaries without <mask>)."""
    from fairseq.data.encoders.utils import get_whole_word_mask

    spm = PretrainingCorpus.load(pretrain_prepared.bin_dir, "train")
    ref = get_whole_word_mask(Namespace(bpe="sentencepiece", sentencepiece_model=pretrain_prepared.tokenizer_files["spm_model"]), spm.dictionary)
    assert np.array_equal(spm.word_start_mask, ref.numpy().astype(bool))
    assert 0.2 < spm.word_start_mask.mean() < 0.9
    gpt2 = PretrainingCorpus.load(pretrain_gpt2_prepared.bin_dir, "train")
    encoder_json, vocab_bpe = gpt2_files
    ref = get_whole_word_mask(Namespace(bpe="gpt2", gpt2_encoder_json=str(encoder_json), gpt2_vocab_bpe=str(vocab_bpe)), gpt2.dictionary)
    assert np.array_equal(gpt2.word_start_mask, ref.numpy().astype(bool))
    assert 0.2 < gpt2.word_start_mask.mean() < 0.9


# ------------------------------------------------------------------------------------------------------
# the Python API fixtures (conftest) and the reader
# ------------------------------------------------------------------------------------------------------


def _check_corpus_against_text(out_dir, split, corpus):
    """Document i of the corpus == document i of tok/{split}.txt, line by line, through dict.txt."""
    docs = read_bert_layout(Path(out_dir) / "tok" / f"{split}.txt")
    assert corpus.num_docs == len(docs)
    assert corpus.num_sentences == sum(len(d) for d in docs)
    for i in (0, len(docs) - 1):
        sents = corpus.document(i)
        assert len(sents) == len(docs[i])
        for arr, line in zip(sents, docs[i]):
            assert arr.dtype == np.int64
            assert arr.tolist() == [corpus.dictionary.index(t) for t in line.split()]  # no eos
        assert corpus.doc_sentence_lengths(i).tolist() == [len(l.split()) for l in docs[i]]


def test_pretrain_fixture_and_reader(pretrain_prepared, pretrain_data):
    s = pretrain_prepared
    assert s.docs_kept == 12 and s.splits["valid"].docs == 2 and s.splits["train"].docs == 10
    meta = json.loads((pretrain_data / "pretrain.json").read_text())
    assert meta["format"] == "etc-pretrain-v1" and meta["tokenizer"] == "spm"
    assert meta["tokenizer_files"] == {"spm_model": "../spm.model"}
    for split in ("train", "valid"):
        corpus = PretrainingCorpus.load(pretrain_data, split)
        assert corpus.tokenizer == "spm" and Path(corpus.tokenizer_files["spm_model"]).is_file()
        _check_corpus_against_text(s.out_dir, split, corpus)
        assert corpus.num_sentences == s.splits[split].items
        assert int(corpus.sentence_sizes.sum()) == s.splits[split].pieces
        assert corpus.sentence_sizes.max() <= 128
        assert all(len(corpus.doc_sentence_lengths(i)) >= 7 for i in range(corpus.num_docs))
        # every sentence appears in exactly one planned example
        lengths = corpus.all_doc_sentence_lengths()
        ex = plan_examples(lengths, 512, 64, reserve_long=1)
        assert sum(b - a for e in ex for _, a, b in e) == corpus.num_sentences
    ws = corpus.word_starts(corpus.sentence(0))
    assert ws[0] and ws.dtype == bool and len(ws) == corpus.sentence_sizes[0]


def test_reader_rejects_inconsistent_files(pretrain_data, tmp_path):
    bad = tmp_path / "bin"
    shutil.copytree(pretrain_data, bad)
    np.save(bad / "valid.docs.npy", np.array([0, 5], dtype=np.int64))
    with pytest.raises(ValueError, match=r"valid\.docs\.npy: not document offsets"):
        PretrainingCorpus.load(bad, "valid")
    (bad / "valid.docs.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"valid\.docs\.npy"):
        PretrainingCorpus.load(bad, "valid")
    (bad / "pretrain.json").unlink()
    with pytest.raises(FileNotFoundError, match="pretrain.json"):
        PretrainingCorpus.load(bad, "train")


# ------------------------------------------------------------------------------------------------------
# the command line, end to end
# ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_spm_run(extra_text, wiki_dump, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli_pretrain_spm") / "out"
    argv = ["-q", "pretrain", "--input", str(extra_text), str(wiki_dump), "--out", str(out), "--max-docs", "5",
            "--valid-docs", "1", "--vocab-size", "1000", "--max-sentence-pieces", "0"]  # fmt: skip
    assert cli_main(argv) == 0
    return out


def test_cli_pretrain_spm_end_to_end(cli_spm_run):
    out = cli_spm_run
    summary = json.loads((out / "prepare.json").read_text())
    # the 3-sentence document is read and dropped; the 2 other hand-written ones and 3 articles kept
    assert (summary["docs_read"], summary["docs_kept"], summary["docs_dropped"]) == (6, 5, 1)
    assert summary["tokenizer"] == "spm" and summary["min_sentences"] == 7
    raw = {s: read_bert_layout(out / "raw" / f"{s}.txt") for s in ("train", "valid")}
    all_docs = raw["train"] + raw["valid"]
    assert len(raw["valid"]) == 1 and len(all_docs) == 5
    assert all(len(d) >= 7 for d in all_docs)
    assert DOC_HARD_SENTENCES in all_docs  # exactly these sentences, one per line
    assert not any("first short document" in line for d in all_docs for line in d)
    titles = (out / "raw" / "train.titles").read_text().split("\n")[:-1] + (out / "raw" / "valid.titles").read_text().split("\n")[:-1]
    assert sorted(titles) == sorted(["extra.txt#1", "extra.txt#2", "Anarchism", "Autism", "Albedo"])
    from etc_fairseq.prepare.spm import load_spm

    sp = load_spm(out / "spm.model")
    for split, docs in raw.items():
        st = summary["splits"][split]
        n_lines = sum(len(d) for d in docs)
        # one binarized item per sentence (nothing is cut with --max-sentence-pieces 0)
        corpus = PretrainingCorpus.load(out / "bin", split)
        assert corpus.num_sentences == n_lines == st["sentences"] == st["items"]
        assert st["long_sentences"] == 0
        assert np.diff(np.load(out / "bin" / f"{split}.docs.npy")).tolist() == [len(d) for d in docs]
        tok = read_bert_layout(out / "tok" / f"{split}.txt")
        assert [len(d) for d in tok] == [len(d) for d in docs]
        for d_raw, d_tok in zip(docs, tok):
            for sentence, pieces in zip(d_raw[:20], d_tok[:20]):
                assert pieces.split() == [sp.id_to_piece(i) for i in sp.encode(sentence)]  # "<unk>" kept as such
        _check_corpus_against_text(out, split, corpus)
        assert int(corpus.sentence_sizes.sum()) == st["pieces"]


def test_cli_pretrain_gpt2_end_to_end_and_srcdict_round_trip(extra_text, wiki_dump, gpt2_files, tmp_path, capsys):
    encoder_json, vocab_bpe = gpt2_files
    common = ["pretrain", "--input", str(extra_text), str(wiki_dump), "--max-docs", "3", "--valid-docs", "1",
              "--tokenizer", "gpt2", "--gpt2-encoder-json", str(encoder_json), "--gpt2-vocab-bpe", str(vocab_bpe),
              "--max-sentence-pieces", "48"]  # fmt: skip
    out = tmp_path / "gpt2"
    assert cli_main(["-q"] + common + ["--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "documents: 3 kept; dropped: 1 with fewer than 7 sentences (--min-sentences)" in printed
    summary = json.loads((out / "prepare.json").read_text())
    assert (summary["docs_read"], summary["docs_kept"], summary["docs_dropped"]) == (4, 3, 1)
    assert (out / "gpt2" / "encoder.json").read_bytes() == Path(encoder_json).read_bytes()
    meta = json.loads((out / "bin" / "pretrain.json").read_text())
    assert meta["tokenizer"] == "gpt2"
    assert meta["tokenizer_files"] == {"gpt2_encoder_json": "../gpt2/encoder.json", "gpt2_vocab_bpe": "../gpt2/vocab.bpe"}
    enc = load_gpt2_bpe(encoder_json, vocab_bpe)
    n_cut = 0
    for split in ("train", "valid"):
        raw = read_bert_layout(out / "raw" / f"{split}.txt")
        tok = read_bert_layout(out / "tok" / f"{split}.txt")
        assert all(len(d) >= 7 for d in raw) and len(tok) == len(raw)
        corpus = PretrainingCorpus.load(out / "bin", split)
        assert corpus.tokenizer == "gpt2" and corpus.num_docs == len(raw)
        assert corpus.sentence_sizes.max() <= 48
        _check_corpus_against_text(out, split, corpus)  # binarized == tok/ through dict.txt
        # each raw sentence is the next 1..k lines of tok/: their ids concatenated are fairseq's GPT-2
        # encoding of the sentence, which decodes back to the sentence exactly (byte-level BPE loses nothing)
        for doc, tok_doc in zip(raw, tok):
            items = [[int(t) for t in line.split()] for line in tok_doc]
            j = 0
            for sentence in doc:
                ids = enc.encode(sentence)
                got, k = [], 0
                while len(got) < len(ids):
                    got += items[j + k]
                    k += 1
                assert got == ids and enc.decode(got) == sentence
                if k > 1:
                    n_cut += 1
                    assert all(enc.decoder[items[j + m][0]].startswith("\u0120") for m in range(1, k))  # cut at word starts
                j += k
            assert j == len(items)
        assert summary["splits"][split]["items"] == corpus.num_sentences
        assert summary["splits"][split]["sentences"] == sum(len(d) for d in raw)
    assert n_cut == summary["splits"]["train"]["long_sentences"] + summary["splits"]["valid"]["long_sentences"] >= 1
    assert summary["splits"]["train"]["unk"] == 0  # the dictionary was built from the train split

    # a RoBERTa-style dict.txt (GPT-2 id -> count) given back as --srcdict: same dictionary, same ids
    again = tmp_path / "gpt2_srcdict"
    assert cli_main(["-q"] + common + ["--out", str(again), "--srcdict", str(out / "bin" / "dict.txt")]) == 0
    assert (again / "bin" / "dict.txt").read_text() == (out / "bin" / "dict.txt").read_text()
    a, b = PretrainingCorpus.load(out / "bin", "train"), PretrainingCorpus.load(again / "bin", "train")
    assert a.num_sentences == b.num_sentences
    assert all(np.array_equal(a.sentence(j), b.sentence(j)) for j in range(0, a.num_sentences, 7))
    assert json.loads((again / "prepare.json").read_text())["splits"]["valid"]["unk"] == summary["splits"]["valid"]["unk"]


def test_cli_pretrain_errors_are_one_line(tmp_path, extra_text, capsys):
    base = ["pretrain", "--input", str(extra_text), "--out", str(tmp_path / "o")]
    assert cli_main(base + ["--tokenizer", "gpt2"]) == 1
    assert "needs --gpt2-encoder-json and --gpt2-vocab-bpe" in capsys.readouterr().err
    missing = tmp_path / "nope.json"
    assert cli_main(base + ["--tokenizer", "gpt2", "--gpt2-encoder-json", str(missing), "--gpt2-vocab-bpe", str(missing)]) == 1
    assert f"{missing}: no such file (given as --gpt2-encoder-json)" in capsys.readouterr().err
    # every document dropped by --min-sentences: the message says so
    assert cli_main(base + ["--min-sentences", "50", "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert "need at least 2 documents" in err and "0 kept; dropped: 3 with fewer than 50 sentences (--min-sentences)" in err
    # a tiny document dropped by --min-doc-chars is reported as such, with the count per reason
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("A short line.\n")
    assert cli_main(["pretrain", "--input", str(extra_text), str(tiny), "--out", str(tmp_path / "o"), "--overwrite",
                     "--min-paragraph-chars", "1", "--min-sentences", "50"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert ("dropped: 1 shorter than 200 characters (--min-doc-chars), 3 with fewer than 50 sentences "
            "(--min-sentences)") in err[0]


def test_gpt2_fetch_is_verified_and_reused(gpt2_files, etc_cache_dir, monkeypatch):
    from etc_fairseq.prepare import gpt2
    from etc_fairseq.prepare.sample_data import sha256_file

    for path, name in zip(gpt2_files, ("encoder.json", "vocab.bpe")):
        _, size, digest = GPT2_MEMBERS[name]
        assert path.stat().st_size == size and sha256_file(path) == digest

    def no_network(*a, **k):
        raise AssertionError("verified cached files must not be downloaded again")

    monkeypatch.setattr(gpt2.subprocess, "run", no_network)
    assert gpt2.fetch_gpt2_bpe_files(etc_cache_dir) == tuple(gpt2_files)
