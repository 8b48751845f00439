"""Natural Questions: official-format reading (full and simplified, gzip or not), word -> piece alignment,
windows and global layout, the official metric on hand-checked cases, window prediction and aggregation,
errors, and end to end (etc-prepare nq -> fairseq-train -> fairseq-validate -> etc-predict -> etc-evaluate).

The documents are real English Wikipedia text (the ``wiki_dump`` fixture); the questions and annotations
are CONSTRUCTED for the tests (NQ's own data is not available offline).
"""
import gzip
import itertools
import json
import re
from pathlib import Path

import pytest
import torch

from etc_fairseq.finetune.nq import metrics as ev
from etc_fairseq.finetune.nq import decode as inf
from etc_fairseq.finetune.nq import convert as prep
from etc_fairseq.structure.global_tokens import global_token_table
from etc_fairseq.finetune.nq import schema
from etc_fairseq.prepare.documents import InputFormatError
from etc_fairseq.structure.global_tokens import GlobalTokenType as T
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------------
# CONSTRUCTED NQ records on real Wikipedia paragraphs
# ------------------------------------------------------------------------------------------------------


def real_paragraphs(wiki_dump, n_docs=3, n_par=4, max_words=25):
    """The first ``n_par`` paragraphs (first ``max_words`` words each) of the first ``n_docs`` articles."""
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    docs = []
    for d in itertools.islice(iter_wikipedia_documents(wiki_dump), n_docs):
        docs.append((d.title, [p.split()[:max_words] for p in d.paragraphs[:n_par]]))
    return docs


def build_document(paragraphs, list_items=None):
    """HTML-tokenized document: ``<P> words </P>`` per paragraph (top-level candidates), then optionally a
    ``<Ul>`` of ``<Li>`` items (the list top-level, items nested). Returns (tokens [(text, is_html)],
    candidates [(start, end, top)], paragraph first-word indices)."""
    toks, cands, firsts = [], [], []
    for words in paragraphs:
        start = len(toks)
        toks.append(("<P>", True))
        firsts.append(len(toks))
        toks += [(w, False) for w in words]
        toks.append(("</P>", True))
        cands.append((start, len(toks), True))
    if list_items:
        ul = len(toks)
        toks.append(("<Ul>", True))
        items = []
        for words in list_items:
            s = len(toks)
            toks += [("<Li>", True)] + [(w, False) for w in words] + [("</Li>", True)]
            items.append((s, len(toks), False))
        toks.append(("</Ul>", True))
        cands.append((ul, len(toks), True))
        cands += items
    return toks, cands, firsts


def annotation(kind, cands, cand_index=None, short=None, yes_no="NONE"):
    """CONSTRUCTED annotation dict (token offsets; bytes added by :func:`record`)."""
    null = {"start_token": -1, "end_token": -1, "candidate_index": -1}
    if kind == "null":
        return {"long_answer": dict(null), "short_answers": [], "yes_no_answer": "NONE"}
    s, e, _ = cands[cand_index]
    return {
        "long_answer": {"start_token": s, "end_token": e, "candidate_index": cand_index},
        "short_answers": [{"start_token": a, "end_token": b} for a, b in (short or [])],
        "yes_no_answer": yes_no,
    }


def record(example_id, question, toks, cands, annotations, form):
    """An NQ record in the full (byte offsets, html flags) or simplified form (a fresh copy: tests may mutate it)."""
    annotations = json.loads(json.dumps(annotations))
    if form == "simplified":
        return {
            "example_id": example_id, "question_text": question, "document_url": "https://en.wikipedia.org",
            "document_text": " ".join(t for t, _ in toks),
            "long_answer_candidates": [{"start_token": s, "end_token": e, "top_level": top} for s, e, top in cands],
            "annotations": annotations,
        }
    starts, pos = [], 0
    for t, _ in toks:
        starts.append(pos)
        pos += len(t.encode("utf-8")) + 1

    def b(span):
        span = dict(span)
        if span["start_token"] >= 0:
            span["start_byte"] = starts[span["start_token"]]
            span["end_byte"] = starts[span["end_token"] - 1] + len(toks[span["end_token"] - 1][0].encode("utf-8"))
        else:
            span["start_byte"] = span["end_byte"] = -1
        return span

    return {
        "example_id": example_id, "question_text": question, "document_url": "https://en.wikipedia.org",
        "document_html": " ".join(t for t, _ in toks),
        "document_tokens": [
            {"token": t, "html_token": h, "start_byte": starts[i], "end_byte": starts[i] + len(t.encode("utf-8"))}
            for i, (t, h) in enumerate(toks)
        ],
        "long_answer_candidates": [b({"start_token": s, "end_token": e, "top_level": top}) for s, e, top in cands],
        "annotations": [
            {"long_answer": b(a["long_answer"]), "short_answers": [b(x) for x in a["short_answers"]], "yes_no_answer": a["yes_no_answer"]}
            for a in annotations
        ],
    }


def write_jsonl(path, records, gz=False):
    data = "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def nq_examples(wiki_dump):
    """CONSTRUCTED examples: per article, (id, question, tokens, candidates, train annotation, 5 dev
    annotations). Answers: paragraph 1 (long) with words 2..4 of it (short); article 2: a yes/no question;
    article 3: a null question (no answer, 1 of 5 dev annotators disagrees)."""
    out = []
    for i, (title, pars) in enumerate(real_paragraphs(wiki_dump)):
        items = [pars[0][:6], pars[1][:5]]
        toks, cands, firsts = build_document(pars, list_items=items)
        q = f"what is {title.lower()}"  # CONSTRUCTED
        f1 = firsts[1]
        if i == 0:
            train = [annotation("long", cands, 1, short=[(f1 + 2, f1 + 5)])]
            dev = [annotation("long", cands, 1, short=[(f1 + 2, f1 + 5)]) for _ in range(3)] + [
                annotation("long", cands, 2), annotation("null", cands)]
        elif i == 1:
            train = [annotation("long", cands, 1, yes_no="YES")]
            dev = [annotation("long", cands, 1, yes_no="YES") for _ in range(2)] + [annotation("null", cands)] * 3
        else:
            train = [annotation("null", cands)]
            dev = [annotation("null", cands)] * 4 + [annotation("long", cands, 0)]
        out.append(dict(id=1000 + i, question=q, toks=toks, cands=cands, firsts=firsts, train=train, dev=dev))
    return out


def write_split(tmp, nq_examples, name, which, form, gz):
    recs = [record(e["id"], e["question"], e["toks"], e["cands"], e[which], form) for e in nq_examples]
    return write_jsonl(tmp / name, recs, gz=gz)


@pytest.fixture(scope="module")
def spm_tok(pretrain_data):
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    return WordPieceTokenizer.from_pretrain_dir(pretrain_data)


# ------------------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------------------


def test_full_gz_and_simplified_read_the_same(nq_examples, tmp_path):
    full = write_split(tmp_path, nq_examples, "dev.jsonl.gz", "dev", "full", gz=True)
    simple = write_split(tmp_path, nq_examples, "dev-simplified.jsonl", "dev", "simplified", gz=False)
    assert full.read_bytes()[:2] == b"\x1f\x8b"
    a, b = list(schema.read_nq_file(full)), list(schema.read_nq_file(simple))
    assert [x.example_id for x in a] == [1000, 1001, 1002]
    for x, y, e in zip(a, b, nq_examples):
        assert x.words == y.words == [t for t, _ in e["toks"]]
        assert x.is_html == y.is_html == [h for _, h in e["toks"]]
        assert x.candidates == y.candidates == e["cands"]
        assert [(k.long_answer.start_token, k.long_answer.end_token, k.yes_no_answer) for k in x.annotations] == [
            (k.long_answer.start_token, k.long_answer.end_token, k.yes_no_answer) for k in y.annotations]
        # byte offsets only in the full form, and they cut the gold text out of the HTML
        la = x.annotations[0].long_answer
        if not la.is_null:
            html = " ".join(x.words).encode("utf-8")
            assert html[la.start_byte:la.end_byte].decode("utf-8") == " ".join(x.words[la.start_token:la.end_token])
            assert y.annotations[0].long_answer.start_byte == -1
    assert schema.decode_gold(schema.encode_gold(a[0].annotations))[3].long_answer.start_token == nq_examples[0]["cands"][2][0]


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: r["annotations"][0]["long_answer"].update(start_token="7"), "annotations[0].long_answer.start_token"),
        (lambda r: r["annotations"][0]["long_answer"].update(end_token=10**6), "annotations[0].long_answer"),
        (lambda r: r["annotations"][0].update(yes_no_answer="MAYBE"), "annotations[0].yes_no_answer"),
        (lambda r: r.pop("question_text"), "question_text"),
        (lambda r: r["long_answer_candidates"][1].update(start_token=-1), "long_answer_candidates[1]"),
    ],
)
def test_bad_record_names_file_line_and_field(nq_examples, tmp_path, mutate, field):
    recs = [record(e["id"], e["question"], e["toks"], e["cands"], e["train"], "full") for e in nq_examples]
    mutate(recs[1])
    path = write_jsonl(tmp_path / "bad.jsonl", recs)
    with pytest.raises(InputFormatError) as ei:
        list(schema.read_nq_file(path))
    msg = str(ei.value)
    assert f"{path}:2" in msg and f"field {field!r}" in msg and "1001" in msg, msg


def test_bad_json_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"example_id": 1}\n{not json\n')
    with pytest.raises(InputFormatError, match=re.escape(f"{path}:1")):
        list(schema.read_nq_file(path))
    path.write_text("{not json\n")
    with pytest.raises(InputFormatError, match=re.escape(f"{path}:1: not valid JSON")):
        list(schema.read_nq_file(path))


# ------------------------------------------------------------------------------------------------------
# windows, alignment, layout
# ------------------------------------------------------------------------------------------------------


def test_window_starts_exact():
    assert prep.window_starts(10, 4, 2) == [0, 2, 4, 6]
    assert prep.window_starts(10, 4, 4) == [0, 4, 8]
    assert prep.window_starts(4, 4, 2) == [0]
    assert prep.window_starts(0, 4, 2) == [0]
    assert prep.window_starts(5, 4, 1) == [0, 1]
    with pytest.raises(ValueError, match="doc-stride"):
        prep.window_starts(10, 4, 5)
    with pytest.raises(ValueError, match="window length"):
        prep.window_starts(10, 0, 1)


def test_alignment_and_global_layout(nq_examples, spm_tok):
    e = nq_examples[0]
    ex = schema.parse_nq_record(record(e["id"], e["question"], e["toks"], e["cands"], e["train"], "simplified"), "t:1")
    enc = prep.encode_example(spm_tok, ex, max_question_pieces=64)
    # every non-HTML word, tokenized alone, in order; HTML words have no pieces
    expect_ids, expect_words = [], []
    for i, (w, h) in enumerate(e["toks"]):
        if not h:
            p = spm_tok.encode_word(w)
            expect_ids += p
            expect_words += [i] * len(p)
    assert enc.doc_ids == expect_ids and enc.doc_word == expect_words
    q_ids, _ = spm_tok.encode_words(e["question"].split())
    assert enc.question_ids == q_ids
    d = spm_tok.dictionary
    n = len(enc.doc_ids)
    arrays, dropped = prep.build_window(enc, ex.candidates, 0, n, d.bos(), d.eos(), global_token_table(d), max_global_len=200)
    q = len(q_ids)
    assert dropped == 0
    assert arrays["long_tokens"] == [d.bos()] + q_ids + [d.eos()] + enc.doc_ids + [d.eos()]
    assert arrays["long_word"] == [-1] * (q + 2) + enc.doc_word + [-1]
    top = [c for c in e["cands"] if c[2]]
    assert arrays["global_tokens"] == [d.bos()] + q_ids + [d.bos()] * len(top)
    assert arrays["global_types"] == [int(T.CLS)] + [int(T.QUESTION)] * q + [int(T.PARAGRAPH)] * len(top)
    seg = arrays["long_segment"]
    assert seg[: q + 2] == [0] + list(range(1, q + 1)) + [-1] and seg[-1] == -1
    for pos in range(q + 2, q + 2 + n):  # each document piece -> the PARAGRAPH token of its top-level candidate
        w = arrays["long_word"][pos]
        k = next(k for k, c in enumerate(top) if c[0] <= w < c[1])
        assert seg[pos] == 1 + q + k
    assert arrays["candidates"] == [list(c[:2]) + [int(c[2])] for c in e["cands"]]
    # gold: long = paragraph 1 (its first and last word), short = words f1+2 .. f1+4
    targets, why = prep.window_targets(enc, ex.annotations[0], 0, n, q + 2)
    assert why == "ok" and targets[4] == schema.TYPE_SHORT
    lw = arrays["long_word"]
    s1, e1, _ = e["cands"][1]
    assert lw[targets[0]] == s1 + 1 and lw[targets[1]] == e1 - 2
    assert lw[targets[0] - 1] != lw[targets[0]] and lw[targets[1] + 1] != lw[targets[1]]  # whole words
    f1 = e["firsts"][1]
    assert lw[targets[2]] == f1 + 2 and lw[targets[3]] == f1 + 4 and lw[targets[3] + 1] == f1 + 5
    # global input full: paragraph tokens beyond it are dropped and counted
    arrays2, dropped2 = prep.build_window(enc, ex.candidates, 0, n, d.bos(), d.eos(), global_token_table(d), max_global_len=1 + q + 2)
    assert len(arrays2["global_tokens"]) == 1 + q + 2 and dropped2 == len(top) - 2
    # fixed blocks: one FIXED_BLOCK global token per 7 long tokens, nothing else
    arrays3, _ = prep.build_window(enc, ex.candidates, 0, n, d.bos(), d.eos(), global_token_table(d), max_global_len=200, fixed_block_len=7)
    L = len(arrays3["long_tokens"])
    assert arrays3["global_types"] == [int(T.FIXED_BLOCK)] * (-(-L // 7))
    assert arrays3["long_segment"] == [i // 7 for i in range(L)]


def test_prepare_exact_windows_over_a_long_document(nq_examples, spm_tok, pretrain_data, tmp_path):
    from etc_fairseq.data.structured import StructuredDataset, read_meta, read_side

    train = write_split(tmp_path, nq_examples, "train.jsonl", "train", "full", gz=False)
    out = tmp_path / "prep"
    stats = prep.prepare_nq({"train": [train]}, out, spm_tok,
                            max_long_len=96, max_global_len=48, doc_stride=32)
    ds = StructuredDataset(out, "train", schema.target_fields(), pad_idx=spm_tok.dictionary.pad())
    side = read_side(out, "train")
    assert len(ds) == stats["train"].windows == len(side) == read_meta(out, "train")["windows"]
    row = 0
    for k, e in enumerate(nq_examples):
        ex = schema.parse_nq_record(record(e["id"], e["question"], e["toks"], e["cands"], e["train"], "full"), "t")
        enc = prep.encode_example(spm_tok, ex, 64)
        wl = 96 - len(enc.question_ids) - 3
        starts = prep.window_starts(len(enc.doc_ids), wl, 32)
        assert len(starts) > 1  # the document is longer than one window
        for j, ws in enumerate(starts):
            item, s = ds[row], side[row]
            we = min(ws + wl, len(enc.doc_ids))
            off = len(enc.question_ids) + 2
            assert s == dict(example_id=e["id"], window=j, num_windows=len(starts),
                             first_word=enc.doc_word[ws], end_word=enc.doc_word[we - 1] + 1)
            assert item["long_tokens"][off:-1].tolist() == enc.doc_ids[ws:we]
            assert item["window_info"].tolist() == [k, j, len(starts)]
            t = item["nq_targets"].tolist()
            targets, _ = prep.window_targets(enc, ex.annotations[0], ws, we, off)
            assert t == targets
            if t[4] != schema.TYPE_NULL:  # gold inside this window: the long answer's words are all in it
                la = ex.annotations[0].long_answer
                lw = item["long_word"]
                assert lw[t[0]] == la.start_token + 1 and lw[t[1]] == la.end_token - 2
            row += 1
    counts = stats["train"].target_types
    assert counts["short"] >= 1 and counts["yes"] >= 1 and counts["null"] >= 3
    assert sum(counts.values()) == len(ds)


def test_prepare_bad_record_leaves_nothing(nq_examples, spm_tok, pretrain_data, tmp_path):
    good = write_split(tmp_path, nq_examples, "train.jsonl.gz", "train", "full", gz=True)
    recs = [record(e["id"], e["question"], e["toks"], e["cands"], e["dev"], "simplified") for e in nq_examples]
    recs[2]["annotations"][4]["short_answers"] = [{"start_token": 5}]
    bad = write_jsonl(tmp_path / "dev.jsonl", recs)
    out = tmp_path / "out"
    with pytest.raises(InputFormatError) as ei:
        prep.prepare_nq({"train": [good], "valid": [bad]}, out, spm_tok,
                        max_long_len=96, max_global_len=48, doc_stride=32)
    assert f"{bad}:3" in str(ei.value) and "annotations[4].short_answers[0].end_token" in str(ei.value)
    assert not out.exists() and not list(tmp_path.glob(".out*"))


# ------------------------------------------------------------------------------------------------------
# official metric (hand-checked)
# ------------------------------------------------------------------------------------------------------


def S(s, e, sb=-1, eb=-1):
    return schema.NqSpan(s, e, sb, eb)


NULL = schema.NqSpan()


def G(long=NULL, shorts=(), yn="none"):
    return ev.NqLabel(long, list(shorts), yn)


def test_annotator_agreement_and_nulls():
    one = [G(S(3, 9))] + [G()] * 4  # 1 of 5 non-null: gold is null
    two = [G(S(3, 9)), G(S(20, 30))] + [G()] * 3  # 2 of 5: gold has a long answer
    assert not ev.gold_has_long_answer(one) and ev.gold_has_long_answer(two)
    assert ev.score_long_answer(one, ev.NqLabel(S(3, 9), long_score=1.0)) == (False, True, False, 1.0)
    assert ev.score_long_answer(two, ev.NqLabel(S(20, 30), long_score=2.0)) == (True, True, True, 2.0)
    assert ev.score_long_answer(two, ev.NqLabel(S(3, 10))) == (True, True, False, 0.0)
    assert ev.score_long_answer(two, ev.NqLabel(NULL)) == (True, False, False, 0.0)
    # a single-annotation (train-style) gold needs threshold 1
    assert not ev.gold_has_long_answer([G(S(1, 2))]) and ev.gold_has_long_answer([G(S(1, 2))], threshold=1)


def test_short_answers_yes_no_sets_and_duplicates():
    a, b = S(4, 6), S(8, 9)
    gold = [G(S(0, 20), [a, b]), G(S(0, 20), [a]), G(), G(), G()]
    assert ev.gold_has_short_answer(gold)
    short = lambda spans=(), yn="none": ev.score_short_answer(gold, ev.NqLabel(NULL, list(spans), yn))[2]
    assert short([b, a]) and short([a]) and short([a, a, b])  # set equality with either annotator; duplicates
    assert not short([b]) and not short([a, S(8, 10)]) and not short(yn="yes")
    yn_gold = [G(S(0, 20), [], "yes"), G(S(0, 20), [], "yes"), G(), G(), G()]
    assert ev.gold_has_short_answer(yn_gold)
    assert ev.score_short_answer(yn_gold, ev.NqLabel(NULL, [], "yes")) == (True, True, True, 0.0)
    assert ev.score_short_answer(yn_gold, ev.NqLabel(NULL, [], "no"))[2] is False
    assert ev.score_short_answer(yn_gold, ev.NqLabel(NULL, [a]))[2] is False
    assert ev.score_short_answer([G(S(0, 20), [], "yes")] + [G()] * 4, ev.NqLabel(NULL, [], "yes"))[:3] == (False, True, False)
    # bytes are compared when both sides have them; tokens otherwise (or when bytes differ)
    assert ev.spans_equal(S(1, 2, 10, 20), S(5, 6, 10, 20))
    assert ev.spans_equal(S(1, 2, 10, 20), S(1, 2))
    assert ev.spans_equal(S(1, 2, 10, 20), S(1, 2, 11, 20))
    assert not ev.spans_equal(S(1, 2, 10, 20), S(1, 3, 11, 20))


def test_best_threshold_scan_and_prf_hand_checked():
    # 4 examples, gold answer in 3; predictions by score: 0.9 correct, 0.8 wrong, 0.5 correct, 0.1 wrong (no gold)
    stats = [(True, True, True, 0.9), (True, True, False, 0.8), (True, True, True, 0.5), (False, True, False, 0.1)]
    m = ev.best_threshold_metrics(stats)
    # thresholds: 0.9 -> P 1, R 1/3, F1 .5 ; 0.8 -> P .5, R 1/3, F1 .4 ; 0.5 -> P 2/3, R 2/3, F1 2/3 ; 0.1 -> P .5, R 2/3, F1 4/7
    assert m["best-threshold-f1"] == pytest.approx(2 / 3) and m["best-threshold"] == 0.5
    assert m["best-threshold-precision"] == pytest.approx(2 / 3) and m["best-threshold-recall"] == pytest.approx(2 / 3)
    assert m["recall-at-precision>=0.9"] == pytest.approx(1 / 3) and m["recall-at-precision>=0.5"] == pytest.approx(2 / 3)
    assert m["recall-at-precision>=0.75"] == pytest.approx(1 / 3)
    f = ev.f1_ignoring_scores(stats)
    assert f["precision"] == 0.5 and f["recall"] == pytest.approx(2 / 3) and f["f1"] == pytest.approx(4 / 7)
    # ties collapse into one threshold: both 0.7 predictions count together
    tie = ev.best_threshold_metrics([(True, True, True, 0.7), (True, True, False, 0.7)])
    assert tie["best-threshold-precision"] == 0.5 and tie["best-threshold-recall"] == 0.5


def test_prediction_file_rules(tmp_path):
    base = {"example_id": 1, "long_answer": {"start_token": 3, "end_token": 9, "start_byte": -1, "end_byte": -1},
            "long_answer_score": 1.0, "short_answers": [], "short_answers_score": 0.0, "yes_no_answer": "NONE"}
    pred, dups = ev.parse_predictions({"predictions": [base, dict(base, long_answer_score=3.0)]})
    assert dups == 1 and pred[1].long_score == 3.0  # last duplicate counts, as officially
    bad = dict(base, yes_no_answer="YES", short_answers=[{"start_token": 4, "end_token": 5}])
    with pytest.raises(InputFormatError, match="cannot coexist"):
        ev.parse_predictions({"predictions": [bad]})
    with pytest.raises(InputFormatError, match=r"predictions\[0\].short_answers_score"):
        ev.parse_predictions({"predictions": [{k: v for k, v in base.items() if k != "short_answers_score"}]})
    with pytest.raises(InputFormatError, match="start must be < end"):
        ev.parse_predictions({"predictions": [dict(base, long_answer={"start_token": 9, "end_token": 9})]})
    no_long = {k: v for k, v in base.items() if k != "long_answer"}
    assert ev.parse_predictions({"predictions": [no_long]})[0][1].long_answer.is_null
    # a non-finite score cannot be ranked (the official scan would order NaN by file position): refused with
    # one line naming the file and the example id
    path = tmp_path / "pred.json"
    for text in ("NaN", "Infinity", "-Infinity"):
        raw = json.dumps({"predictions": [base, dict(base, example_id=-77, short_answers_score=0.5)]})
        path.write_text(raw.replace('"short_answers_score": 0.5', f'"short_answers_score": {text}'))
        with pytest.raises(InputFormatError) as e:
            ev.read_predictions(path)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"{path}: predictions[1] (example_id -77).short_answers_score")
        assert "not a finite score" in msg
    with pytest.raises(ValueError, match="1 gold ids without prediction"):
        ev.score_answers({1: [G()], 2: [G()]}, {1: ev.NqLabel(NULL)})


def random_gold_and_predictions(seed):
    """A seeded random set of 400 CONSTRUCTED gold records (5 annotations each: null, candidate long answers,
    short span sets with byte and token offsets, yes/no) and predictions (copies of a gold answer, with or
    without bytes, reordered and duplicated spans, wrong spans, yes/no, scores in [-3, 3] with ties)."""
    import random

    rng = random.Random(seed)
    cands = [(0, 10), (10, 25), (25, 40), (40, 60), (60, 81)]
    NUL = {"start_token": -1, "end_token": -1, "start_byte": -1, "end_byte": -1}

    def sp(s, e, with_bytes=False):
        return {"start_token": s, "end_token": e, "start_byte": s * 5 if with_bytes else -1, "end_byte": e * 5 if with_bytes else -1}

    gold, preds = [], []
    for i in range(400):
        anns = []
        for _ in range(5):
            if rng.random() < 0.4:
                anns.append({"long_answer": dict(NUL, candidate_index=-1), "short_answers": [], "yes_no_answer": "NONE"})
                continue
            c = rng.randrange(len(cands))
            s, e = cands[c]
            yn, shorts, r2 = "NONE", [], rng.random()
            if r2 < 0.15:
                yn = rng.choice(["YES", "NO"])
            elif r2 < 0.7:
                a0 = rng.randrange(s, e - 1)
                shorts = [sp(a0, a0 + rng.randint(1, 2), True)]
                if rng.random() < 0.3:
                    shorts.append(sp(min(a0 + 3, e - 1), min(a0 + 3, e - 1) + 1, True))
            anns.append({"long_answer": dict(sp(s, e, True), candidate_index=c), "short_answers": shorts, "yes_no_answer": yn})
        gold.append({"example_id": 10**15 + i, "annotations": anns})
        g = rng.choice(anns)
        p = {"example_id": 10**15 + i}
        r = rng.random()
        if r < 0.5 and g["long_answer"]["start_token"] >= 0:
            la = {k: v for k, v in g["long_answer"].items() if k != "candidate_index"}
            if rng.random() < 0.5:
                la["start_byte"] = la["end_byte"] = -1
            p["long_answer"] = la
        elif r < 0.85:
            s, e = rng.choice(cands)
            p["long_answer"] = sp(s, e, rng.random() < 0.5)
        p["long_answer_score"] = round(rng.uniform(-3, 3), 1)
        if g["yes_no_answer"] != "NONE" and rng.random() < 0.6:
            p["yes_no_answer"] = rng.choice(["YES", "NO", g["yes_no_answer"]])
            p["short_answers"] = []
        elif rng.random() < 0.6 and g["short_answers"]:
            p["short_answers"] = [dict(x) for x in reversed(g["short_answers"])] + ([dict(g["short_answers"][0])] if rng.random() < 0.3 else [])
            p["yes_no_answer"] = "NONE"
        elif rng.random() < 0.5:
            a0 = rng.randrange(0, 70)
            p["short_answers"] = [sp(a0, a0 + 1)]
            p["yes_no_answer"] = "NONE"
        else:
            p["short_answers"] = []
        p["short_answers_score"] = round(rng.uniform(-3, 3), 1)
        preds.append(p)
    return gold, {"predictions": preds}


#: the official nq_eval (natural-questions 1.0.6 on PyPI, run once outside the project with absl-py) on
#: ``random_gold_and_predictions(11)``: its JSON output, all 20 numbers
OFFICIAL_SEED_11 = {
    "long-best-threshold-f1": 0.5507246376811594, "long-best-threshold-precision": 0.5775075987841946,
    "long-best-threshold-recall": 0.5263157894736842, "long-best-threshold": -3.0,
    "long-recall-at-precision>=0.5": 0.5263157894736842, "long-precision-at-precision>=0.5": 0.5775075987841946,
    "long-recall-at-precision>=0.75": 0.055401662049861494, "long-precision-at-precision>=0.75": 0.7692307692307693,
    "long-recall-at-precision>=0.9": 0, "long-precision-at-precision>=0.9": 0,
    "short-best-threshold-f1": 0.2922201138519924, "short-best-threshold-precision": 0.308,
    "short-best-threshold-recall": 0.2779783393501805, "short-best-threshold": -2.9,
    "short-recall-at-precision>=0.5": 0.007220216606498195, "short-precision-at-precision>=0.5": 0.6666666666666666,
    "short-recall-at-precision>=0.75": 0, "short-precision-at-precision>=0.75": 0,
    "short-recall-at-precision>=0.9": 0, "short-precision-at-precision>=0.9": 0,
}


def test_matches_the_official_script_on_a_random_set(tmp_path):
    gold, pred = random_gold_and_predictions(11)
    gpath = write_jsonl(tmp_path / "gold.jsonl.gz", gold, gz=True)
    m = ev.nq_metrics(ev.read_gold([gpath]), ev.parse_predictions(pred)[0])
    assert {k: m[k] for k in OFFICIAL_SEED_11} == pytest.approx(OFFICIAL_SEED_11, abs=1e-12)


# ------------------------------------------------------------------------------------------------------
# window prediction and aggregation (exact inputs)
# ------------------------------------------------------------------------------------------------------


def test_window_prediction_start_then_end_and_limits():
    # positions: 0 CLS, 1 question, 2 SEP, 3..9 document words 10..16, 10 SEP
    long_word = torch.tensor([-1, -1, -1, 10, 11, 12, 13, 14, 15, 16, -1])
    ll = torch.zeros(11, 2)
    ll[:, 0] = torch.tensor([1.0, 99, 0, 0, 5, 0, 0, 0, 0, 0, 99])  # best start: position 4 (question/SEP ignored)
    ll[:, 1] = torch.tensor([1.0, 0, 0, 9, 0, 2, 0, 3, 0, 0, 0])  # best end >= 4: position 7 (3 is before the start)
    cands = [[9, 18, 1], [10, 14, 0], [11, 15, 0]]  # predicted words [11, 15) -> candidate (11, 15) exactly
    sl = torch.zeros(11, 2)
    sl[:, 0] = torch.tensor([0.0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0])
    sl[:, 1] = torch.tensor([0.0, 0, 0, 0, 0, 0, 1, 0, 0, 8, 0])
    types = torch.tensor([0.0, -1, -1, 2, 1])
    w = inf.window_prediction(ll, sl, types, long_word, cands, max_short_words=38)
    assert w.long_span == (11, 15) and w.long_score == pytest.approx(5 + 3 - 2)
    assert w.short_span == (10, 17) and w.short_score == pytest.approx(4 + 8) and w.yes_no == "NONE"
    # at most 4 words: the end must be at word <= 13 -> position 6
    w4 = inf.window_prediction(ll, sl, types, long_word, cands, max_short_words=4)
    assert w4.short_span == (10, 14) and w4.short_score == pytest.approx(4 + 1)
    # yes/no replaces the short answer when its logit is the highest type logit
    wy = inf.window_prediction(ll, sl, torch.tensor([0.0, 0.5, 3, 2, 1]), long_word, cands)
    assert wy.yes_no == "NO" and wy.short_span is None and wy.short_score == pytest.approx(12)
    # snapping: a start word outside every candidate -> the closest of all
    assert inf.snap_to_candidate(30, 33, [[9, 18, 1], [28, 31, 1]]) == (28, 31)
    assert inf.snap_to_candidate(10, 18, [[9, 17, 0], [9, 19, 1]]) == (9, 19)  # tie: top-level first
    assert inf.snap_to_candidate(5, 6, []) is None


def test_aggregate_over_windows():
    a = inf.WindowPrediction((1, 5), 2.0, (2, 3), 1.0)
    b = inf.WindowPrediction((6, 9), 3.0, None, 5.0, "YES")
    c = inf.WindowPrediction((1, 5), 3.0, (7, 8), 0.5)
    out = inf.aggregate([("x", a), ("x", b), ("x", c), ("y", inf.WindowPrediction())])
    x = out["x"].to_official("x")
    assert x["long_answer"]["start_token"] == 6 and x["long_answer_score"] == 3.0  # first of the tied best
    assert x["yes_no_answer"] == "YES" and x["short_answers"] == [] and x["short_answers_score"] == 5.0
    y = out["y"].to_official(7)
    assert y["long_answer"]["start_token"] == -1 and y["short_answers"] == [] and y["yes_no_answer"] == "NONE"
    # windows met in another order (fairseq batches by size): ties still go to the earlier window
    rev = inf.aggregate([("x", c), ("x", b), ("x", a)], window_index=[2, 1, 0])
    assert rev["x"].to_official("x") == x


def test_validation_meter_matches_etc_evaluate_and_flags_missing_windows():
    from etc_fairseq.finetune.nq.criterion import NqOfficialMeter

    gold = schema.encode_gold([schema.NqAnnotation(S(3, 9), [S(4, 5)]), schema.NqAnnotation(S(3, 9), [])] + [schema.NqAnnotation(NULL, [])] * 3)
    null_gold = schema.encode_gold([schema.NqAnnotation(NULL, [])] * 5)
    w = [inf.WindowPrediction((3, 9), 2.0, (4, 5), 1.0), inf.WindowPrediction((20, 30), 2.0, (21, 22), 3.0),
         inf.WindowPrediction((3, 9), 0.5, (4, 5), 0.2)]
    windows = [((0, 0, 2), w[0], gold), ((0, 1, 2), w[1], gold), ((1, 0, 1), w[2], null_gold)]
    m = NqOfficialMeter()
    m.update(windows[::-1])  # any order
    got = m.compute()
    assert m.incomplete == 0 and len(m.examples) == 2
    # example 0: long (3, 9) from window 0 (tie at 2.0 -> earlier window), short (21, 22) (score 3) is wrong
    assert got["long-best-threshold-f1"] == 1.0 and got["long-best-threshold"] == 2.0
    assert got["short-answer-precision"] == 0.0 and got["short-answer-recall"] == 0.0
    part = NqOfficialMeter()
    part.update(windows[:1] + windows[2:])
    assert part.incomplete == 1


# ------------------------------------------------------------------------------------------------------
# end to end
# ------------------------------------------------------------------------------------------------------


def _run(cmd, timeout=300):
    proc = run_python(cmd, cwd=REPO, timeout=timeout)
    assert proc.returncode == 0, (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout + proc.stderr


def test_end_to_end(nq_examples, pretrain_data, etc_tiny_checkpoint, tmp_path, capsys):
    from etc_fairseq.cli import evaluate as evaluate_cli
    from etc_fairseq.cli import predict as predict_cli
    from etc_fairseq.cli import prepare as prepare_cli

    train = write_split(tmp_path, nq_examples, "nq-train.jsonl.gz", "train", "full", gz=True)
    dev = write_split(tmp_path, nq_examples, "nq-dev.jsonl", "dev", "simplified", gz=False)
    data = tmp_path / "data"
    rc = prepare_cli.main(["nq", "--train", str(train), "--valid", str(dev), "--pretrain-dir", str(pretrain_data),
                           "--max-long-len", "96", "--max-global-len", "48", "--doc-stride", "48", "--out", str(data)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-2000:]
    assert "valid: 3 examples" in captured.out
    common = ["--user-dir", str(REPO / "user_dir"), "--task", "etc_nq", "--criterion", "etc_nq", "--max-long-len", "96",
              "--max-global-len", "48", "--batch-size", "4", "--required-batch-size-multiple", "1", "--cpu", "--num-workers", "0"]
    save = tmp_path / "ckpt"
    _run(["-m", "fairseq_cli.train", str(data), *common, "--arch", "etc_tiny",
          "--finetune-from-model", str(etc_tiny_checkpoint), "--optimizer", "adam", "--lr", "1e-3",
          "--lr-scheduler", "fixed", "--max-update", "3", "--seed", "1", "--save-dir", str(save),
          "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "1"])
    ckpt = save / "checkpoint_last.pt"
    out = _run(["-m", "fairseq_cli.validate", str(data), *common, "--path", str(ckpt), "--valid-subset", "valid"])
    line = [l for l in out.splitlines() if "nq_long_f1" in l][-1]
    val = {k: float(v) for k, v in re.findall(r"(nq_\w+) ([-\d.]+)", line)}
    assert val["nq_examples"] == 3 and val["nq_incomplete"] == 0, line
    pred = tmp_path / "pred.json"
    rc = predict_cli.main(["nq", "--path", str(ckpt), "--data", str(data), "--output", str(pred), "--device", "cpu"])
    assert rc == 0, capsys.readouterr().err[-2000:]
    recs = json.loads(pred.read_text())["predictions"]
    assert sorted(r["example_id"] for r in recs) == [1000, 1001, 1002]
    metrics_json = tmp_path / "metrics.json"
    assert evaluate_cli.main(["nq", "--predictions", str(pred), "--gold", str(dev), "--output", str(metrics_json)]) == 0
    m = json.loads(metrics_json.read_text())
    # fairseq-validate's official numbers are the same computation on the same aggregated predictions
    for key in ("long", "short"):
        for a, b in (("f1", "f1"), ("p", "precision"), ("r", "recall")):
            assert val[f"nq_{key}_{a}"] == pytest.approx(round(100 * m[f"{key}-best-threshold-{b}"], 2), abs=0.01)
    # gold: 1000 and 1001 have >= 2 non-null long annotations; 1002 has 1 of 5 (null gold)
    gold = ev.read_gold([dev])
    stats_long, stats_short = ev.score_answers(gold, ev.read_predictions(pred))
    assert m["long-answer-n"] == 3 and [s[0] for s in stats_long] == [e in (1000, 1001) for e in gold]
    assert [s[0] for s in stats_short] == [e in (1000, 1001) for e in gold]
    # a bad prediction file is a one-line error naming the field
    pred.write_text(json.dumps({"predictions": [dict(recs[0], long_answer_score="high")]}))
    assert evaluate_cli.main(["nq", "--predictions", str(pred), "--gold", str(dev)]) == 1
    assert "predictions[0].long_answer_score" in capsys.readouterr().err
