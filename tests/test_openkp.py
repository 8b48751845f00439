"""OpenKP: official-format pages -> etc-prepare openkp -> etc_openkp task/criterion -> etc-predict -> etc-evaluate.

Test pages are CONSTRUCTED web pages built from REAL text: real Wikipedia articles from the ``wiki_dump``
fixture become OpenKP records whose VDOM has the title as a heading node and the paragraphs as block nodes,
with a made-up but plausible layout (positions, sizes, fonts). The keyphrases are written for the test
(the title, a two-word phrase of the first paragraph, and for some pages a phrase absent from the page).
"""
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from etc_fairseq.finetune.openkp.metrics import (
    clean_phrases,
    evaluate,
    load_keyphrase_file,
    normalize_phrase,
    precision_recall_at,
    score_document,
)
from etc_fairseq.finetune.openkp.decode import hits_at, top_distinct_batch, top_distinct_ngrams
from etc_fairseq.finetune.openkp.heads import (
    KeyphraseHead,
    VisualFeatureEmbedding,
    encode_visual_features,
    font_size_bucket,
    keyphrase_loss,
    keyphrase_targets,
    rescale_clipped,
    style_cross_index,
    sum_pieces_per_word,
)
from etc_fairseq.prepare.documents import InputFormatError
from etc_fairseq.finetune.openkp.convert import enumerate_ngram_ids, gold_phrase_ids, layout_document, word_nodes
from etc_fairseq.finetune.openkp.schema import GOLD_NOT_IN_DOCUMENT, VdomNode, parse_record
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------------------------------------------
# CONSTRUCTED pages from real Wikipedia text
# ------------------------------------------------------------------------------------------------------------


def _words(text):
    # OpenKP's clean-body text has no punctuation: keep word characters only
    return re.findall(r"\w+", text)


def _feature(x, width, y, height, block, inline, heading, leaf, font, bold, parent=None):
    node = [x, width, y, height, block, inline, heading, leaf, font, bold]
    return [float(v) for v in node + (parent or node)]


def constructed_page(doc, index, max_paragraphs=3, max_paragraph_words=40, absent_phrase=False):
    """One OpenKP record (dict) from a real article: title = heading node, paragraphs = block nodes
    (CONSTRUCTED layout: 48 px left margin, 620 px column, fonts 32 px bold title / 16 px text).
    Keyphrases (CONSTRUCTED): the title words, words 2..3 of the first paragraph, optionally an absent one."""
    title = _words(doc.title)[:5]
    paragraphs = [p for p in (_words(p)[:max_paragraph_words] for p in doc.paragraphs) if len(p) >= 6][:max_paragraphs]
    words, nodes, y = [], [], 40.0
    body = {"x": 48.0, "width": 620.0}
    page = _feature(0, 1280, 0, 4000, 1, 0, 0, 0, 16, 0)[:10]
    nodes.append({"Id": 0, "text": " ".join(title), "start_idx": 0, "end_idx": len(title),
                  "feature": _feature(body["x"], body["width"], y, 40, 1, 0, 1, 1, 32, 1, page)})
    words += title
    y += 60
    for p in paragraphs:
        height = 24.0 * (1 + len(p) // 12)
        nodes.append({"Id": 0, "text": " ".join(p), "start_idx": len(words), "end_idx": len(words) + len(p),
                      "feature": _feature(body["x"], body["width"], y, height, 1, 0, 0, 1, 16, 0, page)})
        words += p
        y += height + 20
    keyphrases = [title, paragraphs[0][2:4]]
    if absent_phrase:
        keyphrases.append(["CONSTRUCTED", "absent", "phrase"])
    return {
        "url": f"http://constructed.example/{index}/{'_'.join(title)}",
        "text": " ".join(words),
        "VDOM": json.dumps(nodes),
        "KeyPhrases": keyphrases,
    }


@pytest.fixture(scope="module")
def wiki_docs(wiki_dump):
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    docs = []
    for doc in iter_wikipedia_documents(wiki_dump):
        if len([p for p in doc.paragraphs if len(_words(p)) >= 6]) >= 3 and _words(doc.title):
            docs.append(doc)
        if len(docs) == 16:
            break
    return docs


@pytest.fixture(scope="module")
def openkp_files(wiki_docs, tmp_path_factory):
    d = tmp_path_factory.mktemp("openkp_official")
    pages = [constructed_page(doc, i, absent_phrase=(i % 4 == 3)) for i, doc in enumerate(wiki_docs)]
    train, valid = pages[:12], pages[12:]
    for name, recs in (("train", train), ("valid", valid)):
        with open(d / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
    return d / "train.jsonl", d / "valid.jsonl", pages


@pytest.fixture(scope="module")
def tokenizer(pretrain_data):
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    return WordPieceTokenizer.from_pretrain_dir(pretrain_data)


def _cli(module, *args, timeout=300):
    proc = run_python(["-m", module, *map(str, args)], cwd=REPO, timeout=timeout)
    return proc


# ------------------------------------------------------------------------------------------------------------
# pure functions: n-grams, layout, gold ids
# ------------------------------------------------------------------------------------------------------------


def test_enumerate_ngram_ids_exact():
    ids, phrases = enumerate_ngram_ids(["New", "York", "new", "york"], max_n=3)
    # visited (0,1) (0,2) (0,3) (1,1) (1,2) (1,3) (2,1) (2,2) (3,1); equal lower-cased texts share ids
    assert phrases == ["new", "new york", "new york new", "york", "york new", "york new york"]
    np.testing.assert_array_equal(ids, [[0, 1, 2], [3, 4, 5], [0, 1, -1], [3, -1, -1]])
    assert ids.dtype == np.int32
    ids5, _ = enumerate_ngram_ids(["a", "b"])
    assert ids5.shape == (2, 5) and ids5.tolist() == [[0, 1, -1, -1, -1], [2, -1, -1, -1, -1]]
    empty, none = enumerate_ngram_ids([])
    assert empty.shape == (0, 5) and none == []


def test_gold_phrase_ids_normalisation_and_absent():
    _, phrases = enumerate_ngram_ids("Online Doctor Appointment System Java Project".split())
    ids, too_long = gold_phrase_ids(
        [["Doctor", "Appointment"], ["doctor", "APPOINTMENT"], [], ["Web", "Application"], ["a", "b", "c", "d", "e", "f"]],
        phrases,
    )
    # duplicates (uncased) and empty phrases dropped; absent -> -2; the 6-word phrase counts but is too long
    assert ids == [phrases.index("doctor appointment"), GOLD_NOT_IN_DOCUMENT, GOLD_NOT_IN_DOCUMENT]
    assert too_long == 1


def test_word_nodes_and_layout_exact():
    nodes = [VdomNode(0, 2, [0.0] * 20), VdomNode(2, 3, [0.0] * 20), VdomNode(4, 6, [0.0] * 20), VdomNode(5, 6, [0.0] * 20)]
    word_node, uncovered, overlapping = word_nodes(6, nodes)
    assert word_node == [0, 0, 1, -1, 2, 2] and uncovered == 1 and overlapping == 1
    pieces = [[10], [11, 12], [13], [14, 15], [16], [17, 18]]
    full = layout_document(pieces, word_node, max_long=100, max_global=10)
    assert full.long_tokens == [10, 11, 12, 13, 14, 15, 16, 17, 18]
    assert full.word_of_piece == [0, 1, 1, 2, 3, 3, 4, 5, 5]
    assert full.long_segment == [0, 0, 0, 1, -1, -1, 2, 2, 2]
    assert full.kept_nodes == [0, 1, 2] and full.num_words == 6 and full.truncated_by is None
    # long binds first: word 3 (2 pieces) would make 6 > 5 tokens; whole words only
    by_long = layout_document(pieces, word_node, max_long=5, max_global=10)
    assert by_long.long_tokens == [10, 11, 12, 13] and by_long.num_words == 3 and by_long.truncated_by == "long"
    assert by_long.kept_nodes == [0, 1]
    # global binds first: word 4 starts a third node
    by_global = layout_document(pieces, word_node, max_long=100, max_global=2)
    assert by_global.num_words == 4 and by_global.truncated_by == "global"
    assert by_global.long_segment == [0, 0, 0, 1, -1, -1] and by_global.kept_nodes == [0, 1]


# ------------------------------------------------------------------------------------------------------------
# visual features
# ------------------------------------------------------------------------------------------------------------


def test_font_size_buckets_exact():
    sizes = torch.tensor([0.0, 0.5, 1.0, 7.9, 8.0, 11.0, 16.0, 26.0, 59.9, 60.0, 100.0])
    assert font_size_bucket(sizes).tolist() == [0, 0, 1, 1, 2, 5, 10, 17, 22, 23, 23]
    assert font_size_bucket(torch.tensor([1e6])).item() == 23  # 24 buckets: 0..23


def test_style_cross_and_clipping_exact():
    b = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    h = torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    bold = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    assert style_cross_index(b, h, bold).tolist() == list(range(8))
    x = torch.tensor([-5.0, 0.0, 500.0, 1000.0, 2000.0, 3000.0])
    assert rescale_clipped(x, 0.0, 2000.0).tolist() == [-1.0, -1.0, -0.5, 0.0, 1.0, 1.0]


def test_encode_visual_features_official_order():
    # the OpenKP README's heading example: node and parent identical
    raw = torch.tensor([[48.0, 619.0, 114.0, 36.0, 1.0, 0.0, 1.0, 0.0, 26.0, 0.0,
                         48.0, 619.0, 172.0, 24.0, 1.0, 0.0, 0.0, 0.0, 16.0, 1.0]])
    bucket, cross, dense = encode_visual_features(raw)
    assert bucket.tolist() == [[17, 10]]  # 26 px, 16 px
    assert cross.tolist() == [[4 + 2 + 0, 4 + 0 + 1]]  # block+heading ; block+bold
    expected = [48 / 1000 - 1, 619 / 1000 - 1, 114 / 5000 - 1, 36 / 1000 - 1, -1, -1,
                48 / 1000 - 1, 619 / 1000 - 1, 172 / 5000 - 1, 24 / 1000 - 1, -1, -1]
    np.testing.assert_allclose(dense[0].tolist(), expected, rtol=1e-6, atol=1e-7)
    assert float(dense.abs().max()) <= 1.0


def test_visual_embedding_long_tokens_get_their_node():
    torch.manual_seed(0)
    emb = VisualFeatureEmbedding(8)
    feats = torch.rand(1, 3, 20) * torch.tensor([2000, 2000, 9000, 500, 1, 1, 1, 1, 40, 1] * 2)
    seg = torch.tensor([[0, 0, 1, -1, 2, 2]])
    pad = torch.tensor([[False, False, True]])  # node 2 is padding here
    long_extra, global_extra = emb(feats, seg, pad)
    assert long_extra.shape == (1, 6, 8) and global_extra.shape == (1, 3, 8)
    assert torch.equal(long_extra[0, 0], global_extra[0, 0]) and torch.equal(long_extra[0, 2], global_extra[0, 1])
    assert long_extra[0, 3].abs().sum() == 0 and global_extra[0, 2].abs().sum() == 0
    assert long_extra[0, 4].abs().sum() == 0  # token of a padded node
    assert not torch.allclose(global_extra[0, 0], global_extra[0, 1])


# ------------------------------------------------------------------------------------------------------------
# head, targets, loss, decoding
# ------------------------------------------------------------------------------------------------------------


def test_sum_pieces_per_word_exact():
    feats = torch.arange(12, dtype=torch.float).view(1, 6, 2)  # pieces p0..p5, features [2p, 2p+1]
    wop = torch.tensor([[0, 0, 1, 2, 2, -1]])
    out = sum_pieces_per_word(feats, wop, 4)
    assert out.tolist() == [[[0 + 2, 1 + 3], [4, 5], [6 + 8, 7 + 9], [0, 0]]]


def test_keyphrase_head_ngram_receptive_field():
    torch.manual_seed(0)
    head = KeyphraseHead(6, max_n=5).eval()
    feats = torch.randn(1, 9, 6)
    wop = torch.tensor([[0, 0, 1, 2, 3, 4, 5, 6, 6]])
    base = head(feats, wop, 7)
    assert base.shape == (1, 7, 5)
    changed = feats.clone()
    changed[0, 4] += 1.0  # a piece of word 3
    out = head(changed, wop, 7)
    for w in range(7):
        for n in range(1, 6):
            covers = w <= 3 < w + n
            assert torch.isclose(out[0, w, n - 1], base[0, w, n - 1]).item() != covers, (w, n)


def test_targets_first_occurrence_vs_max_loss():
    # words: a b a b c ; ids by enumerate_ngram_ids(max_n=2): a=0, ab=1, b=2, ba=3, bc=4, c=5
    ngram_ids = torch.tensor([[[0, 1], [2, 3], [0, 1], [2, 4], [5, -1]]])
    gold = torch.tensor([[1, 5, -2, -1]])  # "a b" (twice), "c", one absent, one padding
    t, found = keyphrase_targets(ngram_ids, gold)
    assert found.tolist() == [2]
    expected = torch.zeros(1, 5, 2)
    expected[0, 0, 1] = 0.5  # first "a b"
    expected[0, 4, 0] = 0.5  # "c"
    assert torch.equal(t, expected)
    logits = torch.zeros(1, 5, 2)
    logits[0, 2, 1] = 3.0  # the second "a b" scores higher
    t_max, _ = keyphrase_targets(ngram_ids, gold, logits, max_loss=True)
    expected_max = torch.zeros(1, 5, 2)
    expected_max[0, 2, 1] = 0.5
    expected_max[0, 4, 0] = 0.5
    assert torch.equal(t_max, expected_max)
    valid = ngram_ids >= 0
    # loss = -(1/2)(log p(ab second) + log p(c)); Z over the 9 valid n-grams
    z = math.log(8 * math.exp(0.0) + math.exp(3.0))
    assert keyphrase_loss(logits, valid, t_max).item() == pytest.approx(-0.5 * ((3.0 - z) + (0.0 - z)), rel=1e-6)
    assert keyphrase_loss(logits, valid, t).item() == pytest.approx(-0.5 * ((0.0 - z) + (0.0 - z)), rel=1e-6)
    none, found0 = keyphrase_targets(ngram_ids, torch.tensor([[-2, -1]]))
    assert found0.tolist() == [0] and none.sum() == 0 and keyphrase_loss(logits, valid, none).item() == 0.0


def test_top_distinct_dedups_uncased_ids():
    scores = [0.9, 0.8, 0.95, 0.1, 0.7, 0.5, 0.6]
    ids = [3, 3, 7, -1, 8, 9, 7]
    assert top_distinct_ngrams(scores, ids, k=3) == [2, 0, 4]  # 7, 3, 8 (index 1 repeats 3, 6 repeats 7)
    assert top_distinct_ngrams(scores, ids, k=10) == [2, 0, 4, 5]  # fewer than k distinct
    logits = torch.tensor(scores + [0.0]).view(1, 4, 2)
    assert top_distinct_batch(logits, torch.tensor(ids + [-1]).view(1, 4, 2), k=3) == [[2, 0, 4]]
    assert hits_at([7, 3, 8, 9, 1], [3, -2, 9]) == [0, 1, 2]


# ------------------------------------------------------------------------------------------------------------
# official metric (hand-checked)
# ------------------------------------------------------------------------------------------------------------


def test_metric_hand_checked_cases():
    assert normalize_phrase(["Doctor", "Appointment"]) == "doctor appointment"
    assert clean_phrases([["A", "B"], [], [""], ["Web", "", "Application"]]) == ["a b", "web  application"]
    # as the official script: words are joined as they are, so an empty word's double space never matches
    # the single-spaced gold phrase, nor does a word holding two spaces
    assert score_document([["web", "", "application"], ["Web  Application"]], [["web", "application"]])["R@5"] == 0
    assert score_document([["Web  Application"]], [["web", "", "application"]])["P@1"] == 1.0
    with pytest.raises(ValueError, match="'web application' is a string"):
        clean_phrases(["web application"])
    # predictions: hit at rank 2, a case duplicate of it (dropped), miss, hit -> distinct [miss, hit, miss, hit]
    pred = [["NBA"], ["Key", "Generator"], ["key", "generator"], ["PC"], ["Xbox"]]
    gold = [["key", "generator"], ["xbox"], ["nba", "2k17"]]
    s = score_document(pred, gold)
    assert s["P@1"] == 0 and s["R@1"] == 0 and s["F1@1"] == 0
    assert s["P@3"] == pytest.approx(1 / 3) and s["R@3"] == pytest.approx(1 / 3) and s["F1@3"] == pytest.approx(1 / 3)
    assert s["P@5"] == pytest.approx(2 / 5) and s["R@5"] == pytest.approx(2 / 3)
    assert s["F1@5"] == pytest.approx(2 * (2 / 5) * (2 / 3) / (2 / 5 + 2 / 3))
    # fewer than 5 predictions: P@k still divides by k; duplicate gold counts once
    s2 = score_document([["web", "application"]], [["Web", "Application"], ["WEB", "application"]])
    assert (s2["P@1"], s2["R@1"], s2["P@3"], s2["P@5"], s2["R@5"]) == (1.0, 1.0, pytest.approx(1 / 3), 0.2, 1.0)
    assert s2["F1@5"] == pytest.approx(2 * 0.2 / 1.2)
    p, r = precision_recall_at([], ["x"], 3)
    assert p == [0, 0, 0] and r == [0, 0, 0]
    result = evaluate({"u1": pred, "u2": [["web", "application"]]}, {"u1": gold, "u2": [["Web", "Application"]]})
    assert result["num_documents"] == 2
    assert result["F1@3"] == pytest.approx((1 / 3 + 2 * (1 / 3) / (4 / 3)) / 2)
    with pytest.raises(InputFormatError, match="not comparable.*'u2'"):
        evaluate({"u1": pred}, {"u1": gold, "u2": gold})
    with pytest.raises(InputFormatError, match="u3.*KeyPhrases"):
        evaluate({"u3": pred}, {"u3": [[]]})


# ------------------------------------------------------------------------------------------------------------
# bad records
# ------------------------------------------------------------------------------------------------------------


def _bad_variants(page):
    bad_json = dict(page, VDOM=page["VDOM"][:-5])
    nodes = json.loads(page["VDOM"])
    nodes[1]["end_idx"] = len(page["text"].split()) + 3
    out_of_bounds = dict(page, VDOM=json.dumps(nodes))
    missing = {k: v for k, v in page.items() if k != "KeyPhrases"}
    nodes2 = json.loads(page["VDOM"])
    del nodes2[0]["feature"]
    missing_feature = dict(page, VDOM=json.dumps(nodes2))
    return [
        (bad_json, r"field 'VDOM' \(a string holding JSON\): not valid JSON"),
        (out_of_bounds, r"field 'VDOM\[1\].start_idx/end_idx': expected a word range 0 <= start_idx <= end_idx <= \d+ "
                        r"\(the number of words in 'text'\), got \[\d+, \d+\]"),
        (missing, r"field 'KeyPhrases': expected a list of word lists .*, got nothing"),
        (missing_feature, r"field 'VDOM\[0\].feature': expected a list of 20 finite numbers, got nothing"),
    ]


def test_string_keyphrases_refused_naming_the_record(tmp_path, capsys):
    # the official evaluator joins a string's characters ("w e b ...") and scores it 0: refused, not split
    from etc_fairseq.cli.evaluate import main

    gold, pred = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl"
    gold.write_text(json.dumps({"url": "u1", "KeyPhrases": [["web", "application"]]}) + "\n")
    pred.write_text(json.dumps({"url": "u1", "KeyPhrases": [["nba"], "web application"]}) + "\n")
    assert main(["openkp", "--predictions", str(pred), "--gold", str(gold)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"{pred}:1 (url 'u1'): field 'KeyPhrases' element 1 is a string 'web application'" in err[0]
    assert "['web', 'application']" in err[0]
    with pytest.raises(InputFormatError, match=r"f.jsonl:3 \(url 'u'\): field 'KeyPhrases' element 0 is a string"):
        parse_record({"url": "u", "text": "a b", "VDOM": "[]", "KeyPhrases": ["a b"]}, "f.jsonl:3", True)


def test_parse_record_errors_name_field(openkp_files):
    _, _, pages = openkp_files
    for bad, pattern in _bad_variants(pages[0]):
        with pytest.raises(InputFormatError, match=pattern):
            parse_record(bad, "f.jsonl:7", require_keyphrases=True)
    rec = parse_record({k: v for k, v in pages[0].items() if k != "KeyPhrases"}, "f:1", require_keyphrases=False)
    assert rec.keyphrases is None and len(rec.nodes) == len(json.loads(pages[0]["VDOM"]))


def test_bad_record_cli_error_and_nothing_written(openkp_files, pretrain_data, tmp_path, capsys):
    from etc_fairseq.cli import prepare as prepare_cli

    train, _, pages = openkp_files
    bad, _ = _bad_variants(pages[1])[1]  # node range out of bounds, on line 3
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (pages[0], pages[2], bad)), encoding="utf-8")
    out = tmp_path / "out"
    capsys.readouterr()
    assert prepare_cli.main(["openkp", "--train", str(path), "--out", str(out), "--pretrain-dir", str(pretrain_data)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("etc-prepare openkp: error: ")
    assert f"{path}:3 (url {bad['url']!r}): field 'VDOM[1].start_idx/end_idx': expected a word range" in err
    assert not out.exists() and list(tmp_path.iterdir()) == [path]


# ------------------------------------------------------------------------------------------------------------
# prepared layout on real pages
# ------------------------------------------------------------------------------------------------------------


def test_prepare_layout_on_constructed_pages(openkp_files, tokenizer, pretrain_data, tmp_path):
    from etc_fairseq.data.structured import StructuredDataset, read_meta, read_side
    from etc_fairseq.finetune.openkp.convert import prepare_openkp
    from etc_fairseq.structure.global_tokens import GlobalTokenType
    from etc_fairseq.finetune.openkp.task import EtcOpenKPTask

    _, valid, pages = openkp_files
    out = tmp_path / "prep"
    stats = prepare_openkp({"valid": valid}, out, tokenizer, max_long=4096, max_global=512)["valid"]
    assert stats.examples == 4 and stats.truncated_by_long == stats.truncated_by_global == 0
    ds = StructuredDataset(out, "valid", EtcOpenKPTask.TARGET_FIELDS, pad_idx=tokenizer.dictionary.pad())
    side = read_side(out, "valid")
    for i, page in enumerate(pages[12:]):
        item, words, nodes = ds[i], page["text"].split(), json.loads(page["VDOM"])
        assert side[i]["url"] == page["url"] and side[i]["words"] == words
        pieces = [tokenizer.encode_word(w, first=(j == 0)) for j, w in enumerate(words)]
        assert item["long_tokens"].tolist() == [p for ps in pieces for p in ps]
        assert item["word_of_piece"].tolist() == [j for j, ps in enumerate(pieces) for _ in ps]
        node_of_word = [k for k, n in enumerate(nodes) for _ in range(n["start_idx"], n["end_idx"])]
        assert item["long_segment"].tolist() == [node_of_word[j] for j, ps in enumerate(pieces) for _ in ps]
        assert item["global_types"].tolist() == [int(GlobalTokenType.VDOM_NODE)] * len(nodes)
        assert item["global_tokens"].tolist() == [tokenizer.dictionary.bos()] * len(nodes)
        assert item["node_features"].tolist() == [n["feature"] for n in nodes]
        ids, phrases = enumerate_ngram_ids(words)
        assert np.array_equal(item["ngram_ids"], ids)
        gold = item["gold_phrases"].tolist()
        assert phrases[gold[0]] == normalize_phrase(page["KeyPhrases"][0])  # the title
        assert phrases[gold[1]] == normalize_phrase(page["KeyPhrases"][1])
        assert gold[2:] == ([GOLD_NOT_IN_DOCUMENT] if len(page["KeyPhrases"]) == 3 else [])
    # truncation: the long length binds for one limit, the global length for the other; counted in meta
    tight = prepare_openkp({"valid": valid}, tmp_path / "tight", tokenizer, max_long=30, max_global=512)["valid"]
    assert tight.truncated_by_long == 4 and read_meta(tmp_path / "tight", "valid")["truncated_by_long"] == 4
    few = prepare_openkp({"valid": valid}, tmp_path / "few", tokenizer, max_long=4096, max_global=2)["valid"]
    assert few.truncated_by_global == 4 and few.nodes_dropped == sum(len(json.loads(p["VDOM"])) - 2 for p in pages[12:])
    # the official evaluation file has no KeyPhrases: accepted as --test, with no gold ids
    test_file = tmp_path / "eval.jsonl"
    test_file.write_text("".join(json.dumps({k: v for k, v in p.items() if k != "KeyPhrases"}) + "\n" for p in pages[12:]))
    prepare_openkp({"test": test_file}, tmp_path / "eval", tokenizer)
    ds_eval = StructuredDataset(tmp_path / "eval", "test", EtcOpenKPTask.TARGET_FIELDS, pad_idx=1)
    assert [ds_eval[i]["gold_phrases"].tolist() for i in range(4)] == [[-1]] * 4
    assert "gold" not in read_side(tmp_path / "eval", "test")[0]
    ds_few = StructuredDataset(tmp_path / "few", "valid", EtcOpenKPTask.TARGET_FIELDS, pad_idx=1)
    for i, page in enumerate(pages[12:]):
        n0, n1 = json.loads(page["VDOM"])[:2]
        assert len(ds_few[i]["global_tokens"]) == 2 and len(ds_few[i]["ngram_ids"]) == n1["end_idx"]


def test_no_visual_features_ablation_and_max_loss_criterion(openkp_files, tokenizer, pretrain_data, tmp_path):
    from fairseq.data import Dictionary

    from etc_fairseq.finetune.openkp.criterion import EtcOpenKPCriterion
    from etc_fairseq.models.architectures import config_for_arch
    from etc_fairseq.models.etc import EtcModel
    from etc_fairseq.finetune.openkp.convert import prepare_openkp
    from etc_fairseq.finetune.openkp.task import EtcOpenKPConfig, EtcOpenKPTask

    _, valid, _ = openkp_files
    prepare_openkp({"valid": valid}, tmp_path / "d", tokenizer)
    losses = {}
    for no_visual in (False, True):
        task = EtcOpenKPTask(EtcOpenKPConfig(data=str(tmp_path / "d"), no_visual_features=no_visual),
                             Dictionary.load(str(tmp_path / "d" / "dict.txt")))
        torch.manual_seed(0)
        model = EtcModel.build_model(config_for_arch("etc_tiny", dropout=0.0, attention_dropout=0.0), task)
        task.build_heads(model)
        assert ("openkp_visual" in model.task_heads) != no_visual
        # the parameter names checkpoints store: moving the heads' code must not change them
        head_keys = {k[len("task_heads."):] for k in model.state_dict() if k.startswith("task_heads.")}
        expected = {f"openkp_keyphrase.{m}.{i}.{p}" for m in ("convs", "out") for i in range(5) for p in ("weight", "bias")}
        if not no_visual:
            expected |= {f"openkp_visual.{m}.{i}.weight" for m in ("font", "style") for i in range(2)}
            expected |= {"openkp_visual.dense.weight", "openkp_visual.dense.bias"}
        assert head_keys == expected
        ds = task.load_dataset("valid")
        sample = ds.collater([ds[i] for i in range(len(ds))])
        model.eval()
        for max_loss in (False, True):
            loss, sample_size, log = EtcOpenKPCriterion(task, max_loss=max_loss)(model, sample)
            assert sample_size == 4 and log["kp_docs"] == 4 and torch.isfinite(loss)
            losses[no_visual, max_loss] = loss.item()
            assert 0 <= log["kp_f1_3"] <= 4
        # max loss picks the best-scoring occurrence: never a higher loss than the first occurrence
        assert losses[no_visual, True] <= losses[no_visual, False] + 1e-5
    assert losses[False, False] != losses[True, False]  # the visual features change the model's input


# ------------------------------------------------------------------------------------------------------------
# end to end: etc-prepare -> fairseq-train -> fairseq-validate -> etc-predict -> etc-evaluate
# ------------------------------------------------------------------------------------------------------------


def _metrics_from_validate(text):
    out = {}
    for key in ("P@1", "R@1", "F1@1", "P@3", "R@3", "F1@3", "P@5", "R@5", "F1@5"):
        m = re.search(re.escape(key) + r" ([0-9.]+)", text)
        assert m, f"{key} not printed by fairseq-validate:\n{text[-2000:]}"
        out[key] = float(m.group(1))
    return out


def test_end_to_end(openkp_files, pretrain_data, etc_tiny_checkpoint, tmp_path, capsys):
    from etc_fairseq.cli import evaluate as evaluate_cli
    from etc_fairseq.cli import predict as predict_cli
    from etc_fairseq.cli import prepare as prepare_cli

    train, valid, pages = openkp_files
    data = tmp_path / "data"
    assert prepare_cli.main(["openkp", "--train", str(train), "--valid", str(valid), "--out", str(data),
                             "--pretrain-dir", str(pretrain_data), "--max-long-len", "256", "--max-global-len", "32"]) == 0
    out = capsys.readouterr().out
    assert "train: 12 examples" in out and "valid: 4 examples" in out
    save = tmp_path / "ckpt"
    # --required-batch-size-multiple 1: fairseq drops a final batch smaller than the multiple (default 8)
    common = ["--user-dir", REPO / "user_dir", "--task", "etc_openkp", "--criterion", "etc_openkp",
              "--max-long-len", "256", "--max-global-len", "32", "--cpu", "--num-workers", "0",
              "--required-batch-size-multiple", "1"]
    proc = _cli("fairseq_cli.train", data, *common, "--arch", "etc_tiny", "--finetune-from-model", etc_tiny_checkpoint,
                "--batch-size", "4", "--optimizer", "adam", "--lr", "1e-3",
                "--lr-scheduler", "fixed", "--max-update", "3", "--seed", "1", "--save-dir", save,
                "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "1",
                "--best-checkpoint-metric", "F1@3", "--maximize-best-checkpoint-metric")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"valid on 'valid' subset .*F1@3 [0-9.]+", proc.stdout + proc.stderr)
    ckpt = save / "checkpoint_last.pt"
    proc = _cli("fairseq_cli.validate", data, *common, "--path", ckpt, "--batch-size", "3", "--valid-subset", "valid")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"valid on 'valid' subset .*\| bsz 4\b", proc.stdout + proc.stderr)  # all 4 documents
    validated = _metrics_from_validate(proc.stdout + proc.stderr)
    preds = tmp_path / "pred.jsonl"
    assert predict_cli.main(["openkp", "--path", str(ckpt), "--data", str(data), "--output", str(preds),
                             "--device", "cpu", "--batch-size", "2"]) == 0
    predicted = load_keyphrase_file(preds, "prediction")
    assert set(predicted) == {p["url"] for p in pages[12:]}
    for page in pages[12:]:
        phrases = predicted[page["url"]]
        assert len(phrases) == 5 and len({normalize_phrase(p) for p in phrases}) == 5
        text = " " + page["text"] + " "
        assert all(1 <= len(p) <= 5 and f" {' '.join(p)} " in text for p in phrases)
    capsys.readouterr()
    # --output FILE, as every etc-evaluate subcommand spells it: the table on stdout, the JSON in FILE
    metrics_file = tmp_path / "metrics.json"
    assert evaluate_cli.main(["openkp", "--predictions", str(preds), "--gold", str(valid), "--output", str(metrics_file)]) == 0
    official = json.loads(metrics_file.read_text())
    assert capsys.readouterr().out.startswith("documents: 4\n@1  P ")
    for name in ("hotpotqa", "wikihop", "nq", "openkp", "nextsent"):  # one spelling across etc-evaluate
        with pytest.raises(SystemExit):
            evaluate_cli.main([name, "--help"])
        assert "--output OUTPUT" in capsys.readouterr().out
    assert official["num_documents"] == 4
    for key, value in validated.items():  # the criterion's metric is the official one
        assert official[key] == pytest.approx(value, abs=1e-4), key
