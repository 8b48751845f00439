"""Tests for etc_fairseq.prepare and the ``etc-prepare`` command, on the real Wikipedia sample
(fixtures in conftest.py) and on small hand-written inputs."""
import bz2
import json
import subprocess
from pathlib import Path

import pytest

from etc_fairseq.cli.prepare import main as cli_main
from etc_fairseq.prepare import sample_data
from etc_fairseq.data.indexed import load_dictionary, load_split
from etc_fairseq.prepare.binarize import BinarizeError, binarize
from etc_fairseq.prepare.documents import (
    DocumentFilter,
    choose_valid_indices,
    detect_input_format,
    read_text_documents,
    write_text_documents,
)
from etc_fairseq.prepare.mlm import spool_and_split
from etc_fairseq.prepare.spm import WORD_START, encode_document_file, load_spm, train_spm, wrap_pieces
from etc_fairseq.prepare.wikipedia import DumpFormatError, WikiStats, iter_pages, iter_wikipedia_documents
from etc_fairseq.prepare.wikitext import wikitext_to_paragraphs
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]
MARKUP = ["{{", "}}", "[[", "]]", "<ref", "</ref", "&amp;", "&nbsp;", "thumb|", "'''", "<!--", "__TOC__"]


# ------------------------------------------------------------------------------------------------------
# the real dump sample
# ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_docs(wiki_dump):
    stats = WikiStats()
    docs = list(iter_wikipedia_documents(wiki_dump, stats=stats))
    return docs, stats


def test_sample_fetch_is_verified_and_reused(wiki_dump, etc_cache_dir, monkeypatch):
    assert wiki_dump.stat().st_size == sample_data.SAMPLE_SIZE
    assert sample_data.sha256_file(wiki_dump) == sample_data.SAMPLE_SHA256
    record = json.loads(Path(str(wiki_dump) + ".json").read_text())
    assert "CC BY-SA" in record["license"] and record["sha256"] == sample_data.SAMPLE_SHA256

    def no_network(*a, **k):
        raise AssertionError("a cached sample must not be downloaded again")

    monkeypatch.setattr(sample_data.subprocess, "run", no_network)
    assert sample_data.fetch_wikipedia_sample(etc_cache_dir) == wiki_dump


def test_sample_fetch_reports_unreachable_registry(tmp_path, monkeypatch):
    def pip_fails(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: Could not find a version (network unreachable)")

    monkeypatch.setattr(sample_data.subprocess, "run", pip_fails)
    with pytest.raises(sample_data.SampleDataError, match=r"could not download gensim==4\.4\.0 with pip.*--input"):
        sample_data.fetch_wikipedia_sample(tmp_path / "cache")
    assert not (tmp_path / "cache" / sample_data.SAMPLE_FILENAME).exists()


def test_dump_reader_on_real_sample(sample_docs):
    docs, stats = sample_docs
    assert stats.pages == 206
    assert stats.skipped["redirect"] == 99
    assert stats.skipped["namespace"] == 1  # "Wikipedia:Adding Wikipedia articles to Nupedia"
    assert stats.skipped["disambiguation"] == 8
    assert stats.articles == len(docs) == 98
    titles = {d.title for d in docs}
    assert {"Anarchism", "Albert Einstein", "Aristotle", "Abraham Lincoln", "Algorithm", "Apollo 11"} <= titles
    assert "AccessibleComputing" not in titles  # a redirect
    assert "Austin (disambiguation)" not in titles
    assert not any(t.startswith("Wikipedia:") for t in titles)
    assert sum(d.num_chars for d in docs) > 2_000_000  # long documents: the point of ETC


def test_dump_text_is_clean_prose(sample_docs):
    docs, _ = sample_docs
    by_title = {d.title: d for d in docs}
    assert by_title["Anarchism"].paragraphs[0].startswith("Anarchism is a political philosophy that advocates")
    # The lead sentence keeps its dates; the pronunciation template and the reference are gone.
    assert by_title["Albert Einstein"].paragraphs[0].startswith("Albert Einstein (14 March 1879 – 18 April 1955) was")
    for d in docs:
        for p in d.paragraphs:
            assert "\n" not in p and p == p.strip() and p
            for m in MARKUP:
                assert m not in p, (d.title, m, p[:200])
    # End sections (References, External links, See also) are dropped.
    assert not any(p.startswith("Retrieved ") for d in docs for p in d.paragraphs)


# ------------------------------------------------------------------------------------------------------
# hand-written dumps and wikitext
# ------------------------------------------------------------------------------------------------------

TINY_DUMP = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">
  <siteinfo><sitename>T</sitename><namespaces>
    <namespace key="0" /><namespace key="1">Talk</namespace><namespace key="14">Category</namespace>
  </namespaces></siteinfo>
  <page><title>Kept Article</title><ns>0</ns><id>1</id><revision><id>9</id>
    <text xml:space="preserve">{{Infobox thing|name=x}}
'''Kept Article''' is a [[test (thing)|test]] of the reader.&lt;ref&gt;{{cite web|url=http://x}}&lt;/ref&gt; It has [[link]]s.
[[File:X.jpg|thumb|A caption]]
== History ==
Second paragraph with &amp;amp; an [http://example.com external title] and {{lang|fr|un mot}}.
* A list item that is long enough to keep.
{| class="wikitable"
| cell || cell
|}
== References ==
{{reflist}}
* A reference line that must not survive.
[[Category:Tests]]
[[de:Behaltener Artikel]]</text></revision></page>
  <page><title>Old Name</title><ns>0</ns><id>2</id><redirect title="Kept Article" /><revision><id>10</id>
    <text>#REDIRECT [[Kept Article]]</text></revision></page>
  <page><title>Text Redirect</title><ns>0</ns><id>3</id><revision><id>11</id>
    <text>#redirect [[Kept Article]]</text></revision></page>
  <page><title>Talk:Kept Article</title><ns>1</ns><id>4</id><revision><id>12</id>
    <text>This talk page is discussion, not an article, and is long enough.</text></revision></page>
  <page><title>Category:Tests</title><id>5</id><revision><id>13</id>
    <text>A category page without an ns element: its namespace comes from the title prefix.</text></revision></page>
  <page><title>Thing (disambiguation)</title><ns>0</ns><id>6</id><revision><id>14</id>
    <text>'''Thing''' may refer to: a long enough line of text here.</text></revision></page>
</mediawiki>
"""


def test_tiny_dump_skips_and_cleans(tmp_path):
    plain = tmp_path / "tiny.xml"
    plain.write_text(TINY_DUMP, encoding="utf-8")
    packed = tmp_path / "tiny-renamed.dat"  # compression and format are detected from content
    packed.write_bytes(bz2.compress(TINY_DUMP.encode()))
    assert detect_input_format(packed) == "wikipedia"
    for path in (plain, packed):
        assert [p.title for p in iter_pages(path)][:2] == ["Kept Article", "Old Name"]
        stats = WikiStats()
        docs = list(iter_wikipedia_documents(path, stats=stats))
        assert [d.title for d in docs] == ["Kept Article"]
        assert stats.skipped == {"redirect": 2, "namespace": 2, "disambiguation": 1}
        assert docs[0].paragraphs == [
            "Kept Article is a test of the reader. It has links.",
            "Second paragraph with & an external title and un mot.",
            "A list item that is long enough to keep.",
        ]


@pytest.mark.parametrize(
    "wikitext, expected",
    [
        ("A [[Foo (bar)|]] pipe trick.", ["A Foo pipe trick."]),
        ("''Iliad'''s hero, ''italic''.", ["Iliad's hero, italic."]),
        ("Born ({{IPA|x}}; {{lang-de|Name}}; 1900).", ["Born (Name; 1900)."]),
        ("Text<!-- hidden --> here.<ref name=a/>", ["Text here."]),
        ("Intro.\n== See also ==\n* [[Other]]\n=== Sub ===\nstill skipped\n== Legacy ==\nKept.", ["Intro.", "Kept."]),
        ("Visible [[:Category:Cats|cat link]] and [[Category:Hidden]].", ["Visible cat link and."]),
        ("10 {{convert|5|km}} away", ["10 5 km away"]),
    ],
)
def test_wikitext_cleaning(wikitext, expected):
    assert wikitext_to_paragraphs(wikitext) == expected


def test_malformed_xml_names_file_and_line(tmp_path):
    bad = tmp_path / "broken.xml"
    text = TINY_DUMP.replace("</title><ns>1</ns>", "</titel><ns>1</ns>")
    bad.write_text(text, encoding="utf-8")
    line = text[: text.index("</titel>")].count("\n") + 1
    with pytest.raises(DumpFormatError, match=rf"broken\.xml: malformed XML at line {line}, column \d+: mismatched tag$"):
        list(iter_wikipedia_documents(bad))

    not_wiki = tmp_path / "other.xml"
    not_wiki.write_text("<html><body/></html>")
    with pytest.raises(DumpFormatError, match=r"other\.xml: not a MediaWiki XML dump .*<html>"):
        list(iter_pages(not_wiki))

    corrupt = tmp_path / "corrupt.xml.bz2"
    corrupt.write_bytes(bz2.compress(TINY_DUMP.encode())[:200] + b"garbage" * 50)
    with pytest.raises(DumpFormatError, match=r"corrupt\.xml\.bz2"):
        list(iter_pages(corrupt))


# ------------------------------------------------------------------------------------------------------
# documents, filters, split
# ------------------------------------------------------------------------------------------------------


def test_text_documents_round_trip_and_filter(tmp_path):
    f = tmp_path / "docs.txt"
    f.write_text("\n\nfirst para of doc zero\n  second\tpara  \n\n\n\nonly para of doc one\n\n", encoding="utf-8")
    assert detect_input_format(f) == "text"
    docs = list(read_text_documents(f))
    assert [(d.title, d.paragraphs) for d in docs] == [
        ("docs.txt#0", ["first para of doc zero", "second para"]),
        ("docs.txt#1", ["only para of doc one"]),
    ]
    out = tmp_path / "out.txt"
    assert write_text_documents(docs, out) == 2
    assert out.read_text() == "first para of doc zero\nsecond para\n\nonly para of doc one\n"
    flt = DocumentFilter(min_paragraph_chars=12, min_doc_chars=21)
    kept = list(flt(docs))
    assert [d.paragraphs for d in kept] == [["first para of doc zero"]]
    assert flt.counts == {"short_paragraphs": 1, "too_short": 1}


def test_valid_split_is_deterministic_disjoint_and_clamped():
    a = choose_valid_indices(100, valid_fraction=0.05, seed=1)
    assert a == choose_valid_indices(100, valid_fraction=0.05, seed=1) and len(a) == 5
    assert a != choose_valid_indices(100, valid_fraction=0.05, seed=2)
    assert len(choose_valid_indices(10, valid_fraction=0.01)) == 1  # never an empty valid split
    assert len(choose_valid_indices(2, valid_fraction=0.9)) == 1  # nor an empty train split
    assert len(choose_valid_indices(30, valid_docs=7)) == 7
    with pytest.raises(ValueError, match="at least 2 documents"):
        choose_valid_indices(1)
    with pytest.raises(ValueError, match="--valid-docs"):
        choose_valid_indices(5, valid_docs=5)


def test_spool_and_split_on_real_docs(sample_docs, tmp_path):
    docs = sample_docs[0][:20]
    first = spool_and_split(iter(docs), tmp_path / "a", 0.2, None, seed=3)
    spool_and_split(iter(docs), tmp_path / "b", 0.2, None, seed=3)
    other = spool_and_split(iter(docs), tmp_path / "c", 0.2, None, seed=4)
    for s in ("train", "valid"):
        assert (tmp_path / "a" / f"{s}.txt").read_bytes() == (tmp_path / "b" / f"{s}.txt").read_bytes()
    train = (tmp_path / "a" / "train.titles").read_text().splitlines()
    valid = (tmp_path / "a" / "valid.titles").read_text().splitlines()
    assert len(valid) == 4 == first["valid"].docs and first["train"].docs == 16
    assert not set(train) & set(valid) and sorted(train + valid) == sorted(d.title for d in docs)
    assert valid != (tmp_path / "c" / "valid.titles").read_text().splitlines()
    assert other["train"].docs == 16
    # Documents keep their text and order within a split.
    back = list(read_text_documents(tmp_path / "a" / "valid.txt"))
    by_title = {d.title: d for d in docs}
    assert [d.paragraphs for d in back] == [by_title[t].paragraphs for t in valid]


# ------------------------------------------------------------------------------------------------------
# sentencepiece and binarization
# ------------------------------------------------------------------------------------------------------


def test_spm_training_is_reproducible(mlm_prepared, tmp_path):
    text = Path(mlm_prepared.out_dir) / "raw" / "train.txt"
    kw = dict(vocab_size=600, input_sentence_size=800, seed=5)
    m1 = train_spm([text], tmp_path / "one" / "spm", **kw)
    m2 = train_spm([text], tmp_path / "two" / "spm", **kw)
    m3 = train_spm([text], tmp_path / "three" / "spm", **{**kw, "seed": 6})
    assert m1.read_bytes() == m2.read_bytes()
    assert m1.with_suffix(".vocab").read_bytes() == m2.with_suffix(".vocab").read_bytes()
    assert m1.read_bytes() != m3.read_bytes()  # another seed samples other lines
    sp = load_spm(m1)
    assert sp.get_piece_size() == 600
    line = "Anarchism is a political philosophy."
    assert sp.encode(line, out_type=str) == load_spm(m2).encode(line, out_type=str)


def test_wrap_pieces_cuts_at_word_starts():
    pieces = [("▁w%d" if i % 3 == 0 else "p%d") % i for i in range(50)]
    chunks = wrap_pieces(pieces, 10)
    assert [p for c in chunks for p in c] == pieces
    assert all(1 <= len(c) <= 10 for c in chunks)
    assert all(c[0].startswith(WORD_START) for c in chunks)
    assert wrap_pieces(pieces, 0) == [pieces] and wrap_pieces([], 5) == []
    assert [len(c) for c in wrap_pieces(["x"] * 25, 10)] == [10, 10, 5]  # no word start: hard cut


def test_encoded_and_binarized_splits_round_trip(mlm_prepared):
    out, bin_dir = Path(mlm_prepared.out_dir), Path(mlm_prepared.bin_dir)
    dictionary = load_dictionary(bin_dir / "dict.txt")
    assert len(dictionary) == mlm_prepared.vocab_size and len(dictionary) % 8 == 0
    for split in ("train", "valid"):
        lines = (out / "spm" / f"{split}.txt").read_text(encoding="utf-8").split("\n")[:-1]
        ds = load_split(bin_dir, split, dictionary)
        assert len(ds) == len(lines)  # blank document separators included
        sizes = [len(line.split()) + 1 for line in lines]  # + eos
        assert list(ds.sizes) == sizes
        assert int(ds.sizes.sum()) == mlm_prepared.splits[split].tokens
        assert max(sizes) <= 255  # max_line_pieces=254 keeps lines inside --tokens-per-sample 256
        n_docs = sum(1 for line in lines if not line) + 1
        assert n_docs == mlm_prepared.splits[split].docs
        for i in (0, 1, len(lines) // 2, len(lines) - 1):
            assert dictionary.string(ds[i]) == lines[i]
        del ds
    # Paragraph text survives encoding: decoding the pieces gives the raw paragraph back.
    sp = load_spm(mlm_prepared.spm_model)
    raw = (out / "raw" / "valid.txt").read_text(encoding="utf-8").split("\n")
    enc = (out / "spm" / "valid.txt").read_text(encoding="utf-8").split("\n")
    assert sp.decode_pieces(enc[0].split()) == raw[0]


def test_binarize_is_atomic_and_refuses_to_clobber(mlm_prepared, tmp_path):
    spm_dir = Path(mlm_prepared.out_dir) / "spm"
    dest = tmp_path / "bin"
    dest.mkdir()
    (dest / "keep.txt").write_text("x")
    with pytest.raises(BinarizeError, match="already exists"):
        binarize(dest, trainpref=spm_dir / "valid.txt")
    with pytest.raises(FileNotFoundError, match="nope.txt: no such train file"):
        binarize(tmp_path / "b2", trainpref=tmp_path / "nope.txt")
    binarize(dest, trainpref=spm_dir / "valid.txt", srcdict=Path(mlm_prepared.bin_dir) / "dict.txt", overwrite=True)
    assert sorted(p.name for p in dest.iterdir()) == ["dict.txt", "preprocess.log", "train.bin", "train.idx"]
    assert [p.name for p in tmp_path.iterdir()] == ["bin"]  # no temporary directories left behind
    assert (dest / "dict.txt").read_bytes() == (Path(mlm_prepared.bin_dir) / "dict.txt").read_bytes()


def test_encode_document_file_keeps_layout(mlm_prepared, tmp_path):
    src = tmp_path / "d.txt"
    src.write_text("Alpha beta gamma.\nDelta.\n\n\nEpsilon zeta.\n", encoding="utf-8")
    stats = encode_document_file(load_spm(mlm_prepared.spm_model), src, tmp_path / "d.spm", max_line_pieces=3)
    lines = (tmp_path / "d.spm").read_text(encoding="utf-8").split("\n")
    assert "" in lines and lines[-1] == ""  # one separator between the two documents, trailing newline
    assert (stats.docs, stats.paragraphs) == (2, 3) and stats.lines >= 3
    assert all(len(line.split()) <= 3 for line in lines)


# ------------------------------------------------------------------------------------------------------
# the constructed classification task
# ------------------------------------------------------------------------------------------------------


def test_classification_data(classification_prepared, classification_data, mlm_prepared):
    bin_dir, n = classification_data
    assert n == classification_prepared.num_classes == 4
    out = Path(classification_prepared.out_dir)
    assert "CONSTRUCTED" in (out / "README.txt").read_text()
    assert (bin_dir / "input0" / "dict.txt").read_bytes() == (Path(mlm_prepared.bin_dir) / "dict.txt").read_bytes()
    label_dict = load_dictionary(bin_dir / "label" / "dict.txt")
    assert [label_dict[i] for i in range(label_dict.nspecial, len(label_dict))] == ["0", "1", "2", "3"]
    for split in ("train", "valid"):
        labels = load_split(bin_dir / "label", split, label_dict)
        inputs = load_split(bin_dir / "input0", split)
        assert len(labels) == len(inputs) == classification_prepared.examples[split]
        ids = [int(labels[i][0]) - label_dict.nspecial for i in range(len(labels))]
        assert [ids.count(c) for c in range(n)] == classification_prepared.per_class[split]
        assert 17 <= inputs.sizes.min() and inputs.sizes.max() <= 255
        del labels, inputs
    train = set((out / "raw" / "train.input0").read_text(encoding="utf-8").splitlines())
    valid = set((out / "raw" / "valid.input0").read_text(encoding="utf-8").splitlines())
    assert not train & valid


# ------------------------------------------------------------------------------------------------------
# the command line
# ------------------------------------------------------------------------------------------------------


def test_cli_mlm_end_to_end_on_dump(wiki_dump, tmp_path):
    out = tmp_path / "data"
    proc = run_python(
        ["-m", "etc_fairseq.cli.prepare", "mlm", "--input", str(wiki_dump), "--out", str(out),
         "--max-docs", "6", "--vocab-size", "400", "--valid-docs", "1", "--seed", "2"],
        cwd=REPO, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "train: 5 docs" in proc.stdout and "valid: 1 docs" in proc.stdout
    assert "docs read" in proc.stderr  # progress/logging goes to stderr
    for rel in ("raw/train.txt", "raw/valid.txt", "spm.model", "spm.vocab", "spm/train.txt", "spm/valid.txt",
                "bin/dict.txt", "bin/train.bin", "bin/train.idx", "bin/valid.bin", "bin/valid.idx"):
        assert (out / rel).is_file(), rel
    summary = json.loads((out / "prepare.json").read_text())
    assert summary["splits"]["train"]["docs"] == 5 and summary["spm_vocab_size"] == 400
    assert summary["args"]["seed"] == 2


def test_cli_on_text_input_and_reuse(mlm_prepared, tmp_path, capsys):
    # A BERT-layout text file of real text (the fixture's cleaned valid split: 3 documents).
    text = Path(mlm_prepared.out_dir) / "raw" / "valid.txt"
    rc = cli_main(["-q", "mlm", "--input", str(text), "--out", str(tmp_path / "t"), "--valid-docs", "1",
                   "--spm-model", mlm_prepared.spm_model, "--srcdict", str(Path(mlm_prepared.bin_dir) / "dict.txt")])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "train: 2 docs" in printed and "valid: 1 docs" in printed
    assert (tmp_path / "t" / "spm.model").read_bytes() == Path(mlm_prepared.spm_model).read_bytes()
    # The same output directory again: refused, unless --overwrite.
    rc = cli_main(["-q", "mlm", "--input", str(text), "--out", str(tmp_path / "t")])
    assert rc == 1 and "exists and is not empty" in capsys.readouterr().err


def test_cli_article_classification_trains_sentencepiece_with_the_given_options(mlm_prepared, tmp_path, monkeypatch):
    # The sentencepiece options add_spm_arguments gives every subcommand reach the training call (stopped there:
    # what follows is covered by test_classification_data).
    import etc_fairseq.prepare.classification as classification

    class Trained(Exception):
        pass

    seen = {}

    def train_spm(inputs, model_prefix, **options):
        seen.update(options)
        raise Trained

    monkeypatch.setattr(classification, "train_spm", train_spm)
    text = Path(mlm_prepared.out_dir) / "raw" / "train.txt"
    with pytest.raises(Trained):
        cli_main(["-q", "article-classification", "--input", str(text), "--out", str(tmp_path / "c"),
                  "--num-articles", "2", "--vocab-size", "300", "--spm-model-type", "bpe", "--character-coverage",
                  "1.0", "--spm-input-sentence-size", "500", "--seed", "3"])
    assert seen == dict(vocab_size=300, model_type="bpe", character_coverage=1.0, input_sentence_size=500, seed=3)
    assert not (tmp_path / "c").exists()


def test_cli_errors_name_the_file(tmp_path, capsys):
    missing = tmp_path / "missing.xml.bz2"
    assert cli_main(["mlm", "--input", str(missing), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert f"{missing}: no such input file" in err and "expected a MediaWiki XML dump" in err

    bad = tmp_path / "bad.xml"
    bad.write_text("<mediawiki><page><title>x</page></mediawiki>")
    assert cli_main(["-q", "mlm", "--input", str(bad), "--out", str(tmp_path / "o2")]) == 1
    assert f"{bad}: malformed XML at line 1" in capsys.readouterr().err

    one_doc = tmp_path / "one.txt"
    one_doc.write_text("a single document paragraph that is long enough to be kept by the filter\n" * 5)
    assert cli_main(["-q", "mlm", "--input", str(one_doc), "--out", str(tmp_path / "o3")]) == 1
    assert "at least 2 documents" in capsys.readouterr().err

    with pytest.raises(SystemExit) as e:  # argparse: --input or --wikipedia-sample is required
        cli_main(["mlm", "--out", str(tmp_path / "o4")])
    assert e.value.code == 2
    assert "--input" in capsys.readouterr().err
