"""WikiHop: reading the official format, the exact layout, the max-heap cropping order, the metric, the
criterion's pure functions, and the whole pipeline on CPU (etc-prepare wikihop -> fairseq-train from the
pre-trained etc_tiny fixture -> fairseq-validate -> etc-predict -> etc-evaluate).

The supports are real Wikipedia paragraphs (the ``wiki_dump`` fixture); queries, candidates and answers are
CONSTRUCTED for the tests (ids start with ``CONSTRUCTED_``).
"""
import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from etc_fairseq.prepare.documents import InputFormatError
from etc_fairseq.finetune.wikihop.convert import (
    LayoutOptions,
    build_example,
    candidate_pattern,
    find_mentions,
    max_heap_truncation,
    prepare_wikihop,
    query_words,
)
from etc_fairseq.finetune.wikihop.schema import WikiHopRecord, read_wikihop
from etc_fairseq.prepare.tokenizer import WordPieceTokenizer
from etc_fairseq.structure.global_tokens import GlobalTokenType as T
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]

# The first paragraphs of two articles of the real dump sample, as sentencex splits them.
ACHILLES = [
    "In Greek mythology, Achilles (Ἀχιλλεύς, Akhilleus,) was a Greek hero of the Trojan War and the central "
    "character and greatest warrior of Homer's Iliad.",
    "His mother was the nymph Thetis, and his father, Peleus, was the king of the Myrmidons.",
]
PARIS = [
    "An American in Paris is a jazz-influenced symphonic poem by the American composer George Gershwin, "
    "written in 1928.",
    "Inspired by the time Gershwin had spent in Paris, it evokes the sights and energy of the French capital in "
    "the 1920s and is one of his best-known compositions.",
]


@pytest.fixture(scope="module")
def real_paragraphs(wiki_dump):
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    want = {"Achilles", "An American in Paris"}
    found = {}
    for doc in iter_wikipedia_documents(wiki_dump):
        if doc.title in want:
            found[doc.title] = doc.paragraphs[0]
            if len(found) == len(want):
                break
    assert found["Achilles"] == " ".join(ACHILLES)
    assert found["An American in Paris"] == " ".join(PARIS)
    return found


@pytest.fixture(scope="module")
def tokenizer(pretrain_data):
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    return WordPieceTokenizer.from_pretrain_dir(pretrain_data)


def layout_record(paragraphs) -> WikiHopRecord:
    """CONSTRUCTED query/candidates over the two real paragraphs."""
    return WikiHopRecord(
        id="CONSTRUCTED_layout",
        query="composer an american in paris",
        candidates=["thetis", "george gershwin", "homer", "ira gershwin"],
        supports=[paragraphs["Achilles"], paragraphs["An American in Paris"]],
        answer="george gershwin",
    )


# ---------------------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------------------
def _write(tmp_path, records, name="data.json"):
    path = tmp_path / name
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


GOOD = {"id": "CONSTRUCTED_0", "query": "r s", "candidates": ["a b", "c"], "supports": ["A B here."], "answer": "c"}


@pytest.mark.parametrize(
    "change, field, expected",
    [
        ({"answer": "zzz"}, "answer", 'expected one of the 2 candidates (compared lower-cased and stripped), got "zzz"'),
        ({"supports": "A B here."}, "supports", 'expected a list of strings, got "A B here."'),
        ({"supports": ["ok", 3]}, "supports[1]", "expected a string, got 3"),
        ({"candidates": []}, "candidates", "at least one candidate"),
        ({"candidates": ["a", " "]}, "candidates[1]", 'expected a non-empty string, got " "'),
        ({"query": None}, "query", "expected a non-empty string, got null"),
        ({"answer": 1}, "answer", "expected a string, got 1"),
    ],
)
def test_read_errors_name_file_record_and_field(tmp_path, change, field, expected):
    path = _write(tmp_path, [GOOD, {**GOOD, "id": "CONSTRUCTED_bad", **change}])
    with pytest.raises(InputFormatError) as e:
        read_wikihop(path)
    msg = str(e.value)
    assert str(path) in msg and "record 1" in msg and "'CONSTRUCTED_bad'" in msg and f"field {field!r}" in msg
    assert expected in msg


def test_read_test_file_without_answers_and_case_insensitive_answer(tmp_path):
    no_answer = {k: v for k, v in GOOD.items() if k != "answer"}
    recs = read_wikihop(_write(tmp_path, [no_answer, {**GOOD, "id": "CONSTRUCTED_1", "answer": " A B"}]))
    assert recs[0].answer is None and recs[1].answer == " A B"
    with pytest.raises(InputFormatError, match="duplicate id"):
        read_wikihop(_write(tmp_path, [GOOD, GOOD], "dup.json"))
    with pytest.raises(InputFormatError, match="expected a JSON list"):
        read_wikihop(_write(tmp_path, {"id": 1}, "obj.json"))


def test_cli_error_is_one_line(tmp_path, capsys, pretrain_data):
    from etc_fairseq.cli.prepare import main

    bad = _write(tmp_path, [{**GOOD, "supports": {"x": 1}}])
    rc = main(["wikihop", "--valid", str(bad), "--out", str(tmp_path / "out"), "--pretrain-dir", str(pretrain_data)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err[-1].startswith("etc-prepare wikihop: error: ") and "'CONSTRUCTED_0'" in err[-1] and "'supports'" in err[-1]
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------
# pure pieces
# ---------------------------------------------------------------------------------------------------------
def test_query_words_and_mentions():
    assert query_words("country_of_citizenship john smith") == ["country", "of", "citizenship", "john", "smith"]
    words = "In 1928 George  Gershwin's poem; not georgegershwin nor George-Gershwin, but GEORGE GERSHWIN.".split()
    spans = find_mentions(words, candidate_pattern("george gershwin"))
    # "George Gershwin's" (word boundary before the apostrophe) and "GEORGE GERSHWIN." match;
    # "georgegershwin" and "George-Gershwin," do not (no whitespace between the words).
    assert spans == [(2, 3), (10, 11)]
    assert find_mentions("the homer's Iliad and Homeric".split(), candidate_pattern("homer")) == [(1, 1)]
    assert find_mentions(["(1996)", "x"], candidate_pattern("1996")) == [(0, 0)]


def test_max_heap_truncation_order():
    # long budget: contexts with the most sentences lose their last sentence first; ties -> later context
    t = max_heap_truncation([[2, 2, 2], [1, 1, 1, 1, 1], [3, 3]], long_budget=9, global_budget=100)
    assert t.dropped == [(1, 4), (1, 3), (1, 2), (0, 2), (2, 1)]
    assert t.kept == [2, 2, 1] and t.dropped_contexts == 0
    # global budget: a context emptied of sentences also frees its context token
    t = max_heap_truncation([[1], [1, 1]], long_budget=100, global_budget=2)
    assert t.dropped == [(1, 1), (1, 0)] and t.kept == [1, 0] and t.dropped_contexts == 1
    # fits: nothing dropped
    t = max_heap_truncation([[5], [5]], long_budget=10, global_budget=4)
    assert t.dropped == [] and t.kept == [1, 1]


# ---------------------------------------------------------------------------------------------------------
# exact layout on real paragraphs
# ---------------------------------------------------------------------------------------------------------
def _expected(tokenizer):
    """Independent per-sentence tokenization of the layout record's parts."""
    q, _ = tokenizer.encode_words(["composer", "an", "american", "in", "paris"], first_is_start=True)
    sents = []
    for sentences in (ACHILLES, PARIS):
        for i, s in enumerate(sentences):
            sents.append(tokenizer.encode_words(s.split(), first_is_start=i == 0))
    return q, sents


def _structure(arrays, radius=16):
    from etc_fairseq.structure.builders import build_structure
    from etc_fairseq.structure.labels import RelativeLabelVocab

    vocab = RelativeLabelVocab(max_distance=4)
    t = {k: torch.as_tensor(v, dtype=torch.long).unsqueeze(0) for k, v in arrays.items()}
    s = build_structure(
        long_padding_mask=torch.zeros_like(t["long_tokens"], dtype=torch.bool),
        global_padding_mask=torch.zeros_like(t["global_tokens"], dtype=torch.bool),
        vocab=vocab,
        local_radius=radius,
        **{k: t[k] for k in ("long_segment", "global_parent", "long_context", "global_context", "long_links", "global_hard_g2l")
           if k in t},
    )
    return s, vocab


def test_exact_layout_links_and_structure(real_paragraphs, tokenizer):
    rec = layout_record(real_paragraphs)
    counts = Counter()
    a = build_example(rec, tokenizer, LayoutOptions(), counts)
    bos = tokenizer.dictionary.bos()
    q, sents = _expected(tokenizer)
    Q, C = len(q), 4
    lens = [len(ids) for ids, _ in sents]
    starts = np.cumsum([Q] + lens[:-1]).tolist()  # long offset of each sentence
    ctx_a, s_a0, s_a1, ctx_p, s_p0, s_p1 = range(C + Q, C + Q + 6)

    # token order and global tokens
    assert a["long_tokens"].tolist() == q + sum((ids for ids, _ in sents), [])
    assert a["global_tokens"].tolist() == [bos] * C + q + [bos] * 6
    assert a["global_types"].tolist() == [T.CANDIDATE] * C + [T.QUESTION] * Q + [T.CONTEXT, T.SENTENCE, T.SENTENCE] * 2
    # structure ids
    seg = list(range(C, C + Q))
    for g, n in zip((s_a0, s_a1, s_p0, s_p1), lens):
        seg += [g] * n
    assert a["long_segment"].tolist() == seg
    assert a["global_parent"].tolist() == [-1] * (C + Q) + [-1, ctx_a, ctx_a, -1, ctx_p, ctx_p]
    assert a["long_context"].tolist() == [0] * Q + [1] * (lens[0] + lens[1]) + [2] * (lens[2] + lens[3])
    # each candidate its own context (after the 2 supports' contexts 1, 2), the query in context 0
    assert a["global_context"].tolist() == [3, 4, 5, 6] + [0] * Q + [1, 1, 1, 2, 2, 2]
    assert a["global_hard_g2l"].tolist() == [1] * C + [0] * (Q + 6)  # candidates read only their mentions
    assert a["answer_index"].tolist() == [1] and a["candidate_correct"].tolist() == [0, 1, 0, 0]

    # links: thetis -> "Thetis," (sentence A1), george gershwin -> "George Gershwin," (P0), homer -> "Homer's" (A0)
    def pieces_of(sentence, words):
        ids, wop = sents[sentence]
        split = (ACHILLES + PARIS)[sentence].split()
        idx = [split.index(w) for w in words]
        return [starts[sentence] + p for p, w in enumerate(wop) if w in idx]

    want = {}
    for cand, sentence, words in ((0, 1, ["Thetis,"]), (1, 2, ["George", "Gershwin,"]), (2, 0, ["Homer's"])):
        for p in pieces_of(sentence, words):
            want[p] = cand
    links = a["long_links"]
    assert links.shape == (len(a["long_tokens"]), 4)
    assert {p: int(links[p, 0]) for p in np.nonzero(links[:, 0] >= 0)[0]} == want
    assert (links[:, 1:] == -1).all()
    assert counts["candidates_unmentioned"] == 1 and counts["mentions"] == 3 and counts["answers_unmentioned"] == 0
    assert counts["truncated_examples"] == 0

    # labels and masks selected from build_structure
    s, vocab = _structure(a)
    lab = vocab.label
    r = s.local_radius
    end_a = starts[2] - 1  # last piece of support A; the next piece starts support P
    assert not bool(s.l2l_mask[0, end_a, r + 1]) and bool(s.l2l_mask[0, end_a, r - 1])
    assert int(s.l2l_rel[0, end_a, r - 1]) == vocab.position_id(-1)
    george = pieces_of(2, ["George"])[0]
    thetis = pieces_of(1, ["Thetis,"])[0]
    assert int(s.l2g_rel[0, thetis, 0]) == lab("belongs")  # a mention belongs to its candidate
    assert int(s.l2g_rel[0, thetis, 1]) == lab("not_belongs")
    assert int(s.l2g_rel[0, thetis, s_a1]) == lab("belongs")
    assert int(s.l2g_rel[0, thetis, ctx_a]) == lab("belongs")
    assert int(s.l2g_rel[0, thetis, ctx_p]) == lab("not_belongs")
    assert int(s.g2l_rel[0, 1, george]) == lab("belongs") and int(s.l2g_rel[0, george, 0]) == lab("not_belongs")
    assert not bool(s.g2l_mask[0, 0, george])  # candidate 0 reads only its own mentions
    assert int(s.l2g_rel[0, 0, C]) == lab("belongs")  # first query piece -> its QUESTION token
    g = s.g2g_rel[0]
    assert int(g[s_a0, ctx_a]) == lab("parent") and int(g[ctx_a, s_a1]) == lab("child")
    assert int(g[s_a0, s_a1]) == vocab.position_id(1)
    assert int(g[s_a0, s_p0]) == lab("other_context") and int(g[ctx_a, ctx_p]) == lab("other_context")
    # candidates are unordered among themselves and with the query: no position tells them apart
    assert int(g[0, 1]) == lab("other_context") and int(g[0, C]) == lab("other_context")
    assert int(g[1, 0]) == lab("other_context") and int(g[0, 0]) == vocab.position_id(0)
    assert int(g[0, ctx_a]) == lab("other_context")
    assert bool(s.g2g_mask.all()) and bool(s.l2g_mask.all()) and bool(s.g2l_mask[0, C:].all())
    # a candidate's g2l row is exactly its mentions ("ira gershwin", never mentioned, reads no long token)
    for k in range(C):
        assert s.g2l_mask[0, k].nonzero().flatten().tolist() == sorted(p for p, c in want.items() if c == k)
    assert not bool(s.g2l_mask[0, 3].any())
    # --candidate-attention all (the official setting): candidates read every long token
    soft = build_example(rec, tokenizer, LayoutOptions(candidate_attention="all"))
    assert "global_hard_g2l" not in soft
    assert bool(_structure(soft)[0].g2l_mask.all())
    with pytest.raises(ValueError, match="candidate_attention"):
        LayoutOptions(candidate_attention="some")


def test_flat_structure(real_paragraphs, tokenizer):
    rec = layout_record(real_paragraphs)
    full = build_example(rec, tokenizer, LayoutOptions())
    flat = build_example(rec, tokenizer, LayoutOptions(flat_structure=True))
    assert "long_links" not in flat and "global_hard_g2l" not in flat
    for k in ("long_tokens", "global_tokens", "global_types", "long_segment"):
        assert flat[k].tolist() == full[k].tolist()
    assert (flat["global_parent"] == -1).all() and (flat["long_context"] == 0).all() and (flat["global_context"] == 0).all()
    s, vocab = _structure(flat)
    q, sents = _expected(tokenizer)
    end_a = len(q) + len(sents[0][0]) + len(sents[1][0]) - 1
    ctx_a = 4 + len(q)
    assert bool(s.l2l_mask[0, end_a, s.local_radius + 1])  # no cut between supports
    assert int(s.l2g_rel[0, end_a, ctx_a]) == vocab.label("not_belongs")  # only sentence-level membership
    assert int(s.l2g_rel[0, end_a, ctx_a + 2]) == vocab.label("belongs")
    assert int(s.g2g_rel[0, ctx_a + 1, ctx_a]) == vocab.position_id(-1)
    assert (s.l2g_rel[0, :, :4] == vocab.label("not_belongs")).all()  # no candidate links


def test_truncation_in_layout(real_paragraphs, tokenizer):
    rec = layout_record(real_paragraphs)
    q, sents = _expected(tokenizer)
    lens = [len(ids) for ids, _ in sents]
    # one sentence too long: both supports have 2 sentences, the later one loses its last sentence
    counts = Counter()
    a = build_example(rec, tokenizer, LayoutOptions(max_long_len=len(q) + sum(lens) - 1), counts)
    assert a["long_tokens"].tolist() == q + sents[0][0] + sents[1][0] + sents[2][0]
    assert counts["truncated_examples"] == 1 and counts["dropped_sentences"] == 1 and counts["dropped_contexts"] == 0
    # two global tokens too many: P loses sentence 1, then A (now the larger) loses sentence 1
    counts = Counter()
    a = build_example(rec, tokenizer, LayoutOptions(max_global_len=4 + len(q) + 4), counts)
    assert a["long_tokens"].tolist() == q + sents[0][0] + sents[2][0]
    assert a["global_types"].tolist()[-4:] == [T.CONTEXT, T.SENTENCE, T.CONTEXT, T.SENTENCE]
    assert counts["dropped_sentences"] == 2
    # the mention in A's dropped sentence ("Thetis,") is gone: thetis and ira gershwin are unmentioned now
    assert counts["candidates_unmentioned"] == 2
    with pytest.raises(ValueError, match="CONSTRUCTED_layout.*4 candidates"):
        build_example(rec, tokenizer, LayoutOptions(max_global_len=3))


def test_no_globals_layout_puts_the_candidates_into_the_long_input(real_paragraphs, tokenizer):
    """--no-globals: long = CLS | query | each candidate's pieces | supports, one CLS global token, no
    structure; long_candidate marks the candidate list, question_len the query; cropping counts the list."""
    from etc_fairseq.errors import ConfigError

    rec = layout_record(real_paragraphs)
    q, sents = _expected(tokenizer)
    cands = [tokenizer.encode_words(c.split(), first_is_start=True)[0] for c in rec.candidates]
    bos = tokenizer.dictionary.bos()
    counts = Counter()
    a = build_example(rec, tokenizer, LayoutOptions(no_globals=True), counts)
    head = [bos] + q + sum(cands, [])
    assert a["long_tokens"].tolist() == head + sum((ids for ids, _ in sents), [])
    assert a["global_tokens"].tolist() == [bos] and a["global_types"].tolist() == [T.CLS]
    L = len(a["long_tokens"])
    assert a["long_segment"].tolist() == [0] * L and a["long_context"].tolist() == [0] * L
    assert a["long_candidate"].tolist() == [-1] * (1 + len(q)) + [k for k, c in enumerate(cands) for _ in c] + \
        [-1] * (L - len(head))
    assert a["question_len"].tolist() == [len(q)]
    assert a["answer_index"].tolist() == [1] and a["candidate_correct"].tolist() == [0, 1, 0, 0]
    assert set(a) == {"long_tokens", "global_tokens", "global_types", "long_segment", "long_context", "answer_index",
                      "candidate_correct", "long_candidate", "question_len"}
    assert counts["candidates_unmentioned"] == 1 and counts["truncated_examples"] == 0
    # the candidate list takes long budget: one piece less than everything drops P's last sentence
    counts = Counter()
    lens = [len(ids) for ids, _ in sents]
    cut = build_example(rec, tokenizer, LayoutOptions(max_long_len=len(head) + sum(lens) - 1, no_globals=True), counts)
    assert cut["long_tokens"].tolist() == head + sents[0][0] + sents[1][0] + sents[2][0]
    assert counts["dropped_sentences"] == 1
    # no global budget for the candidates: 4 candidates fit with --max-global-len 1
    assert build_example(rec, tokenizer, LayoutOptions(max_global_len=1, no_globals=True))["global_tokens"].size == 1
    with pytest.raises(InputFormatError, match=r"CONSTRUCTED_layout.*candidates' \d+ pieces do not fit into --max-long-len 4"):
        build_example(rec, tokenizer, LayoutOptions(max_long_len=4, no_globals=True))
    with pytest.raises(ConfigError, match="--no-globals and --flat-structure"):
        LayoutOptions(no_globals=True, flat_structure=True)


def test_candidate_strings_layout_lets_each_candidate_token_read_its_string(real_paragraphs, tokenizer):
    """--candidate-strings: the ETC layout with each candidate's pieces after the query, in the candidate's own
    context, belonging to its CANDIDATE token, which reads exactly its string and its mentions."""
    from etc_fairseq.errors import ConfigError

    rec = layout_record(real_paragraphs)
    q, sents = _expected(tokenizer)
    cands = [tokenizer.encode_words(c.split(), first_is_start=True)[0] for c in rec.candidates]
    Q, C = len(q), 4
    lens = [len(ids) for ids, _ in sents]
    plain = build_example(rec, tokenizer, LayoutOptions())
    counts = Counter()
    a = build_example(rec, tokenizer, LayoutOptions(candidate_strings=True), counts)
    strings = sum(cands, [])
    H = Q + len(strings)  # long offset of the first support piece
    assert a["long_tokens"].tolist() == q + strings + sum((ids for ids, _ in sents), [])
    assert set(a) == set(plain)
    for k in ("global_tokens", "global_types", "global_parent", "global_context", "global_hard_g2l",
              "answer_index", "candidate_correct"):
        assert a[k].tolist() == plain[k].tolist(), k
    own = [k for k, c in enumerate(cands) for _ in c]
    assert a["long_segment"].tolist() == plain["long_segment"].tolist()[:Q] + own + plain["long_segment"].tolist()[Q:]
    assert a["long_context"].tolist() == [0] * Q + [3 + k for k in own] + plain["long_context"].tolist()[Q:]
    # the mentions' links moved by the strings' length, the strings themselves carry none
    assert a["long_links"].tolist() == plain["long_links"].tolist()[:Q] + [[-1] * 4] * len(strings) + \
        plain["long_links"].tolist()[Q:]
    assert counts["candidates_unmentioned"] == 1 and counts["truncated_examples"] == 0

    s, vocab = _structure(a)
    r = s.local_radius
    starts = np.cumsum([0] + [len(c) for c in cands]).tolist()
    for k in range(C):
        string = list(range(Q + starts[k], Q + starts[k + 1]))
        mentions = [p - len(strings) for p in np.nonzero(np.asarray(a["long_links"])[:, 0] == k)[0]]
        plain_mentions = np.nonzero(np.asarray(plain["long_links"])[:, 0] == k)[0].tolist()
        assert mentions == plain_mentions
        assert s.g2l_mask[0, k].nonzero().flatten().tolist() == string + [p + len(strings) for p in mentions]
        assert int(s.l2g_rel[0, string[0], k]) == vocab.label("belongs")
        # l2l is cut around each string: its last piece sees neither the next string nor the first support
        assert not bool(s.l2l_mask[0, string[-1], r + 1])
    assert not bool(s.l2l_mask[0, Q - 1, r + 1])  # the query ends before the first string
    # the strings take long budget: one piece less than everything drops P's last sentence
    counts = Counter()
    cut = build_example(rec, tokenizer, LayoutOptions(max_long_len=H + sum(lens) - 1, candidate_strings=True), counts)
    assert cut["long_tokens"].tolist() == q + strings + sents[0][0] + sents[1][0] + sents[2][0]
    assert counts["dropped_sentences"] == 1
    with pytest.raises(InputFormatError, match=r"CONSTRUCTED_layout.*the 4 candidates' \d+ pieces do not fit into --max-long-len 4"):
        build_example(rec, tokenizer, LayoutOptions(max_long_len=4, candidate_strings=True))
    with pytest.raises(ConfigError, match="--no-globals and --candidate-strings"):
        LayoutOptions(no_globals=True, candidate_strings=True)


def test_mean_by_index_on_exact_small_matrices():
    """mean_by_index: the mean of each item's long tokens among the first W, present where it has one."""
    from etc_fairseq.finetune.common.selection import mean_by_index

    features = torch.tensor([[[1.0, 0.0], [3.0, 2.0], [5.0, 4.0], [7.0, 6.0]]])  # [1, W=4, 2]
    index = torch.tensor([[-1, 1, 1, 0, 0]])  # [1, L=5]: the last token lies beyond the W features
    means, present = mean_by_index(features, index, 3)
    assert means.tolist() == [[[7.0, 6.0], [4.0, 3.0], [0.0, 0.0]]] and present.tolist() == [[True, True, False]]
    means, present = mean_by_index(features[:, :2], index, 2)  # a window of 2: item 0 is not read
    assert means.tolist() == [[[0.0, 0.0], [3.0, 2.0]]] and present.tolist() == [[False, True]]


# ---------------------------------------------------------------------------------------------------------
# metric and criterion pieces
# ---------------------------------------------------------------------------------------------------------
def test_metric_hand_checked(tmp_path):
    from etc_fairseq.finetune.wikihop.metrics import evaluate, is_correct

    assert is_correct("George Gershwin\n", " george gershwin")
    assert not is_correct("george  gershwin", "george gershwin")  # only case and surrounding whitespace
    assert not is_correct(None, "x")
    s = evaluate({"a": " Paris ", "b": "london", "c": "x"}, [("a", "paris"), ("b", "berlin"), ("d", "rome")])
    assert (s.correct, s.total, s.missing, s.unknown) == (1, 3, 1, 1)
    assert s.accuracy == pytest.approx(100 / 3)


def test_baselines_on_hand_checked_records():
    """Word overlap scores a candidate by the best support that mentions it; ties are split evenly; random
    is the mean share of correct candidates."""
    from etc_fairseq.finetune.wikihop.metrics import baselines, expected_accuracy, word_overlap_scores

    rec = WikiHopRecord(
        id="a", query="country_of_citizenship marie curie", answer="poland",
        candidates=["poland", "france", "Sweden"],
        supports=["Marie Curie was born in Warsaw, Poland.", "She worked in France and in Poland.",
                  "Nobel lived in sweden."])
    # the subject's content words {marie, curie}: support 0 shares both; poland's best support is 0
    assert word_overlap_scores(rec) == [2.0, 0.0, 0.0]
    assert expected_accuracy([1.0, 1.0, 0.0, 1.0], [False, True, True, False]) == pytest.approx(1 / 3)
    unanswered = WikiHopRecord(id="c", query="x y", answer=None, candidates=["p"], supports=["p"])
    recs = [  # subject word in support 0 only, which mentions alpha; no shared word (a 3-way tie); 2 tied
        WikiHopRecord("d", "paragraph_mentions sailing", ["alpha", "beta", "gamma"],
                      ["Alpha went sailing.", "Beta stayed home.", "Gamma."], "alpha"),
        WikiHopRecord("e", "paragraph_mentions rowing", ["alpha", "beta", "gamma"], ["Alpha.", "Beta.", "Gamma."],
                      "gamma"),
        WikiHopRecord("f", "paragraph_mentions flying", ["alpha", "beta", "gamma"],
                      ["Alpha and beta were flying.", "Gamma."], "beta"),
    ]
    assert [word_overlap_scores(r) for r in recs] == [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    assert baselines([rec, *recs, unanswered]) == {
        "random_accuracy": pytest.approx(100 / 3, abs=0.01),
        "overlap_accuracy": pytest.approx(100 * (1 + 1 + 1 / 3 + 1 / 2) / 4, abs=0.01)}
    assert baselines([unanswered]) == {}


def test_predict_file_evaluate_round_trip(tmp_path, capsys):
    from etc_fairseq.cli.evaluate import main

    gold = _write(tmp_path, [
        {**GOOD, "id": "CONSTRUCTED_a", "answer": "c"},
        {**GOOD, "id": "CONSTRUCTED_b", "answer": "A B"},
        {**GOOD, "id": "CONSTRUCTED_c", "answer": "a b"},
        {**GOOD, "id": "CONSTRUCTED_d", "answer": "c"},
    ], "gold.json")
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({"CONSTRUCTED_a": "C ", "CONSTRUCTED_b": "a b", "CONSTRUCTED_c": "c"}))
    metrics_file = tmp_path / "metrics.json"
    assert main(["wikihop", "--predictions", str(pred), "--gold", str(gold), "--output", str(metrics_file)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"accuracy": 50.0, "correct": 2, "total": 4, "missing": 1, "unknown": 0}
    assert json.loads(metrics_file.read_text()) == out
    pred.write_text(json.dumps({"CONSTRUCTED_a": ["c"]}))
    assert main(["wikihop", "--predictions", str(pred), "--gold", str(gold)]) == 1
    assert "'CONSTRUCTED_a'" in capsys.readouterr().err


def test_candidate_logits_and_loss():
    from etc_fairseq.finetune.wikihop.criterion import loss_and_counts
    from etc_fairseq.finetune.wikihop.decode import candidate_logits

    head = torch.tensor([[1.0, 5.0, 2.0, 9.0], [3.0, 0.0, 7.0, 7.0], [0.0, 1.0, 0.0, 0.0]])
    types = torch.tensor([
        [T.CANDIDATE, T.CANDIDATE, T.CANDIDATE, T.SENTENCE],
        [T.QUESTION, T.CANDIDATE, T.CANDIDATE, T.CONTEXT],
        [T.CANDIDATE, T.CANDIDATE, T.QUESTION, T.QUESTION],
    ])
    logits, mask = candidate_logits(head, types)
    assert logits[:, :2].tolist() == [[1.0, 5.0], [0.0, 7.0], [0.0, 1.0]]
    assert logits[0, 2] == 2.0 and math.isinf(logits[1, 2]) and math.isinf(logits[2, 2])
    assert mask.tolist() == [[True] * 3, [True, True, False], [True, True, False]]
    answer = torch.tensor([1, 0, -1])  # the third example has no answer (test split)
    correct = torch.tensor([[0, 1, 0], [1, 0, 0], [0, 0, 0]])
    loss, n_correct, n_labelled = loss_and_counts(logits, answer, correct)
    want = -math.log(math.exp(5) / (math.exp(1) + math.exp(5) + math.exp(2))) + math.log(1 + math.exp(7))
    assert float(loss) == pytest.approx(want, rel=1e-5)
    assert (n_correct, n_labelled) == (1, 2)


def test_mean_by_type_on_exact_small_matrices():
    from etc_fairseq.finetune.common.selection import mean_by_type

    features = torch.arange(24, dtype=torch.float32).reshape(2, 4, 3)  # [B=2, G=4, D=3]
    types = torch.tensor([[T.CANDIDATE, T.QUESTION, T.QUESTION, T.CONTEXT],
                          [T.CANDIDATE, T.CONTEXT, T.SENTENCE, T.CANDIDATE]])
    mean = mean_by_type(features, types, T.QUESTION)
    assert mean.tolist() == [[4.5, 5.5, 6.5], [0.0, 0.0, 0.0]]  # rows 1 and 2 of example 0; none in example 1
    assert mean_by_type(features, types, T.CANDIDATE)[1].tolist() == [16.5, 17.5, 18.5]  # rows 0 and 3


def test_question_cosine_head_adds_the_scaled_cosine_to_the_candidate_logits(tmp_path, wiki_dump, pretrain_data):
    """--question-cosine: a second head whose scaled cosine between each CANDIDATE token's output and the mean
    of the QUESTION tokens' outputs is added to the candidate head's logit; a scale <= 0 is refused."""
    from etc_fairseq.encoder.heads import scaled_cosine
    from etc_fairseq.errors import ConfigError
    from etc_fairseq.finetune.wikihop.decode import CANDIDATE_HEAD, QUESTION_HEAD, candidate_scores
    from etc_fairseq.finetune.wikihop.task import EtcWikiHopConfig, EtcWikiHopTask
    from etc_fairseq.models import config_for_arch

    raw, data = tmp_path / "raw", tmp_path / "data"
    assert _construct_module().main(
        ["--dump", str(wiki_dump), "--out", str(raw), "--train", "4", "--valid", "3", "--supports", "3", "--seed", "3",
         "--max-articles", "30", "--train-articles", "20"]) == 0
    prepare_wikihop({"valid": raw / "dev.json"}, data, WordPieceTokenizer.from_pretrain_dir(pretrain_data),
                    LayoutOptions(max_long_len=512, max_global_len=64))

    def build(**cfg):
        task = EtcWikiHopTask.setup_task(EtcWikiHopConfig(data=str(data), max_long_len=512, max_global_len=64,
                                                          seed=1, **cfg))
        torch.manual_seed(1)
        return task, task.build_model(config_for_arch("etc_tiny", dropout=0.0, attention_dropout=0.0)).eval()

    assert set(build()[1].task_heads) == {CANDIDATE_HEAD}
    with pytest.raises(ConfigError, match=r"--question-cosine-scale: expected a scale > 0, got 0"):
        build(question_cosine=True, question_cosine_scale=0.0)
    task, model = build(question_cosine=True)
    assert set(model.task_heads) == {CANDIDATE_HEAD, QUESTION_HEAD}
    ds = task.load_dataset("valid")
    sample = ds.collater([ds[i] for i in range(len(ds))])
    types = sample["net_input"]["global_types"]
    with torch.no_grad():
        features, extra = task.forward_features(model, sample)
        logits, mask = candidate_scores(model, sample, features, extra)
        qh = model.task_heads[QUESTION_HEAD]
        for b in range(types.size(0)):
            g = extra["global_features"][b]  # [G, D]
            cands, query = g[types[b].eq(int(T.CANDIDATE))], g[types[b].eq(int(T.QUESTION))].mean(dim=0)
            assert len(cands) == 3 and types[b].eq(int(T.QUESTION)).sum() > 0
            expected = (model.task_heads[CANDIDATE_HEAD](cands).squeeze(-1)
                        + scaled_cosine(qh.item_proj(cands)[None], qh.query_proj(query)[None], qh.log_scale.exp())[0])
            assert torch.allclose(logits[b][mask[b]], expected, atol=1e-5)
        # the cosine reaches the logits: they change when the scale does
        qh.log_scale.add_(1.0)
        assert not torch.allclose(candidate_scores(model, sample, features, extra)[0][mask], logits[mask])


# ---------------------------------------------------------------------------------------------------------
# end to end
# ---------------------------------------------------------------------------------------------------------
def _construct_module():
    from examples.wikihop import construct

    return construct


def test_construct_queries(tmp_path, wiki_dump, pretrain_data):
    """construct.py's two CONSTRUCTED query kinds are what its docstring says, on real paragraphs."""
    from etc_fairseq.finetune.wikihop.convert import LayoutOptions, candidate_pattern, prepare_wikihop
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    construct = _construct_module()
    args = ["--dump", str(wiki_dump), "--train", "12", "--valid", "6", "--supports", "3", "--seed", "5",
            "--max-articles", "30", "--train-articles", "20"]
    for query in ("paragraph_mentions", "mentioned_as"):
        assert construct.main([*args, "--out", str(tmp_path / query), "--query", query]) == 0
    train = json.loads((tmp_path / "paragraph_mentions" / "train.json").read_text())
    for r in train:  # WORD in exactly one support, the answer that support's article
        kind, word = r["query"].split()
        hits = [k for k, s in enumerate(r["supports"]) if word in re.findall(r"[a-z]{5,}", s.lower())]
        assert kind == "paragraph_mentions" and len(hits) == 1 and r["answer"] == r["candidates"][hits[0]]
    records = json.loads((tmp_path / "mentioned_as" / "train.json").read_text())
    assert len(records) == 12 and len({r["query"] for r in records}) > 6
    for r in records:
        kind, word = r["query"].split()
        assert kind == "mentioned_as" and word.lower() == r["answer"] and r["answer"] in r["candidates"]
        assert len(set(r["candidates"])) == 3
        for c in r["candidates"]:  # every candidate a word of exactly one support
            assert sum(bool(candidate_pattern(c).search(s)) for s in r["supports"]) == 1, (c, r["id"])
        # the query spells the word as the text does (a cased vocabulary gives the two spellings other pieces)
        assert any(re.search(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", s) for s in r["supports"])
    assert construct.main([*args, "--out", str(tmp_path / "swapped"), "--query", "mentioned_as", "--swap-queries"]) == 0
    dev = json.loads((tmp_path / "mentioned_as" / "dev.json").read_text())
    swapped = json.loads((tmp_path / "swapped" / "dev.json").read_text())
    assert [r["query"] for r in swapped] == [r["query"] for r in dev[1:] + dev[:1]]
    assert [(r["candidates"], r["supports"], r["answer"]) for r in swapped] == [
        (r["candidates"], r["supports"], r["answer"]) for r in dev]
    summary = prepare_wikihop({"train": tmp_path / "mentioned_as" / "train.json"}, tmp_path / "data",
                              WordPieceTokenizer.from_pretrain_dir(pretrain_data),
                              LayoutOptions(max_long_len=1024, max_global_len=64))
    assert summary["train"]["candidates_unmentioned"] == 0 and summary["train"]["truncated_examples"] == 0


def test_end_to_end(tmp_path, wiki_dump, pretrain_data, etc_tiny_checkpoint, capsys):
    from etc_fairseq.cli.evaluate import main as evaluate_main
    from etc_fairseq.cli.predict import main as predict_main
    from etc_fairseq.cli.prepare import main as prepare_main

    raw = tmp_path / "raw"
    assert _construct_module().main(
        ["--dump", str(wiki_dump), "--out", str(raw), "--train", "8", "--valid", "6", "--supports", "3", "--seed", "3",
         "--max-articles", "30", "--train-articles", "20"]
    ) == 0
    data = tmp_path / "data"
    assert prepare_main([
        "wikihop", "--train", str(raw / "train.json"), "--valid", str(raw / "dev.json"), "--test", str(raw / "test.json"),
        "--out", str(data), "--pretrain-dir", str(pretrain_data), "--max-long-len", "384", "--max-global-len", "64",
    ]) == 0
    meta = json.loads((data / "valid.meta.json").read_text())
    assert meta["num_examples"] == 6 and meta["counts"]["records"] == 6 and meta["counts"]["candidates"] == 18
    assert meta["counts"]["random_accuracy"] == pytest.approx(100 / 3, abs=0.01)  # 3 candidates, 1 correct
    from etc_fairseq.finetune.wikihop.metrics import baselines
    assert meta["counts"]["overlap_accuracy"] == baselines(read_wikihop(raw / "dev.json"))["overlap_accuracy"]
    assert "overlap_accuracy" not in json.loads((data / "test.meta.json").read_text())["counts"]  # no answers
    capsys.readouterr()

    common = ["--user-dir", str(REPO / "user_dir"), "--task", "etc_wikihop", "--criterion", "etc_wikihop",
              "--max-long-len", "384", "--max-global-len", "64", "--cpu", "--num-workers", "0",
              "--required-batch-size-multiple", "1"]
    save = tmp_path / "ckpt"
    train = run_python(
        ["-m", "fairseq_cli.train", str(data), *common, "--arch", "etc_tiny",
         "--finetune-from-model", str(etc_tiny_checkpoint), "--batch-size", "4", "--optimizer", "adam",
         "--lr", "1e-3", "--lr-scheduler", "fixed", "--max-update", "3", "--seed", "1", "--no-epoch-checkpoints",
         "--disable-validation", "--log-format", "simple", "--log-interval", "1", "--save-dir", str(save)],
        cwd=REPO, timeout=600,
    )
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    log = train.stdout + train.stderr
    assert re.search(r"num_updates=3\b", log) and re.search(r"accuracy=[\d.]+", log)
    ckpt = save / "checkpoint_last.pt"

    valid = run_python(
        ["-m", "fairseq_cli.validate", str(data), *common, "--path", str(ckpt),
         "--valid-subset", "valid", "--batch-size", "1"],
        cwd=REPO, timeout=600,
    )
    assert valid.returncode == 0, valid.stdout[-3000:] + valid.stderr[-3000:]
    m = re.search(r"valid on 'valid' subset .*\| accuracy ([\d.]+)", valid.stdout + valid.stderr)
    assert m, (valid.stdout + valid.stderr)[-2000:]
    validate_accuracy = float(m.group(1))

    pred = tmp_path / "pred.json"
    assert predict_main(["wikihop", "--path", str(ckpt), "--data", str(data), "--split", "valid",
                         "--output", str(pred), "--batch-size", "1", "--device", "cpu"]) == 0
    predictions = json.loads(pred.read_text())
    gold = json.loads((raw / "dev.json").read_text())
    assert set(predictions) == {r["id"] for r in gold}
    assert all(predictions[r["id"]] in r["candidates"] for r in gold)
    capsys.readouterr()
    assert evaluate_main(["wikihop", "--predictions", str(pred), "--gold", str(raw / "dev.json")]) == 0
    scores = json.loads(capsys.readouterr().out)
    expected_correct = sum(predictions[r["id"]] == r["answer"] for r in gold)
    assert scores["correct"] == expected_correct and scores["total"] == 6 and scores["missing"] == 0
    # fairseq-validate's accuracy (criterion) equals etc-evaluate's (official definition) on the same model
    assert scores["accuracy"] == pytest.approx(validate_accuracy, abs=1e-3)

    # the test split has no answers: predictions still work and match the valid ones (same inputs)
    pred_test = tmp_path / "pred_test.json"
    assert predict_main(["wikihop", "--path", str(ckpt), "--data", str(data), "--split", "test",
                         "--output", str(pred_test), "--batch-size", "2", "--device", "cpu"]) == 0
    assert json.loads(pred_test.read_text()) == predictions


def test_no_globals_end_to_end_scores_candidates_from_their_pieces(tmp_path, wiki_dump, pretrain_data,
                                                                    etc_tiny_checkpoint, capsys):
    """The local-only arm: etc-prepare wikihop --no-globals -> fairseq-train --question-cosine (2 updates) ->
    fairseq-validate == etc-evaluate on etc-predict's file; the loaded model's candidate scores are the heads
    applied to the mean of each candidate's pieces and of the query's, and the last layer computes only the
    long side."""
    from etc_fairseq.cli.evaluate import main as evaluate_main
    from etc_fairseq.cli.predict import main as predict_main
    from etc_fairseq.cli.prepare import main as prepare_main
    from etc_fairseq.encoder.heads import scaled_cosine
    from etc_fairseq.finetune.wikihop.decode import CANDIDATE_HEAD, QUESTION_HEAD, candidate_scores
    from etc_fairseq.finetune.common.runner import load_checkpoint

    raw, data = tmp_path / "raw", tmp_path / "data"
    assert _construct_module().main(
        ["--dump", str(wiki_dump), "--out", str(raw), "--train", "6", "--valid", "4", "--supports", "3", "--seed", "3",
         "--max-articles", "30", "--train-articles", "20"]) == 0
    assert prepare_main(["wikihop", "--train", str(raw / "train.json"), "--valid", str(raw / "dev.json"), "--out",
                         str(data), "--pretrain-dir", str(pretrain_data), "--max-long-len", "384",
                         "--max-global-len", "8", "--no-globals"]) == 0
    assert json.loads((data / "prepare.json").read_text())["no_globals"] is True
    capsys.readouterr()
    common = ["--user-dir", str(REPO / "user_dir"), "--task", "etc_wikihop", "--criterion", "etc_wikihop",
              "--max-long-len", "384", "--max-global-len", "8", "--cpu", "--num-workers", "0",
              "--required-batch-size-multiple", "1", "--question-cosine"]
    save = tmp_path / "ckpt"
    train = run_python(
        ["-m", "fairseq_cli.train", str(data), *common, "--arch", "etc_tiny", "--finetune-from-model",
         str(etc_tiny_checkpoint), "--batch-size", "3", "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler",
         "fixed", "--max-update", "2", "--seed", "1", "--no-epoch-checkpoints", "--disable-validation",
         "--log-format", "simple", "--log-interval", "1", "--save-dir", str(save)], cwd=REPO, timeout=600)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    ckpt = save / "checkpoint_last.pt"
    valid = run_python(["-m", "fairseq_cli.validate", str(data), *common, "--path", str(ckpt), "--valid-subset",
                        "valid", "--batch-size", "2"], cwd=REPO, timeout=600)
    m = re.search(r"valid on 'valid' subset .*\| accuracy ([\d.]+)", valid.stdout + valid.stderr)
    assert valid.returncode == 0 and m, (valid.stdout + valid.stderr)[-3000:]
    pred = tmp_path / "pred.json"
    assert predict_main(["wikihop", "--path", str(ckpt), "--data", str(data), "--output", str(pred),
                         "--batch-size", "3", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert evaluate_main(["wikihop", "--predictions", str(pred), "--gold", str(raw / "dev.json")]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == pytest.approx(float(m.group(1)), abs=1e-3)

    model, task, _ = load_checkpoint(ckpt, data)
    assert task.encoder_outputs() == ("long",)
    ds = task.load_dataset("valid")
    sample = ds.collater([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        features, extra = task.forward_features(model, sample)
        logits, mask = candidate_scores(model, sample, features, extra)
        qh = model.task_heads[QUESTION_HEAD]
        for b in range(features.size(0)):
            idx, q_len = sample["target"]["long_candidate"][b], int(sample["target"]["question_len"][b, 0])
            cands = torch.stack([features[b][idx.eq(k)].mean(dim=0) for k in range(3)])  # [3, D]
            query = features[b, 1:1 + q_len].mean(dim=0)
            expected = (model.task_heads[CANDIDATE_HEAD](cands).squeeze(-1)
                        + scaled_cosine(qh.item_proj(cands)[None], qh.query_proj(query)[None], qh.log_scale.exp())[0])
            assert mask[b].tolist() == [True] * 3 and torch.allclose(logits[b], expected, atol=1e-5)
