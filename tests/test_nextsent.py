"""The CONSTRUCTED next-sentence task (etc_fairseq/finetune/nextsent) on real Wikipedia text: record
construction (determinism from the seed, held-out articles never seen in training, the answer is the
sentence that followed the question), the exact layout of a tiny record, the metric's tie rule and edge
cases (pure and vectorised), the baselines, and prepare -> fairseq-train -> fairseq-validate -> etc-predict
-> etc-evaluate on CPU.
"""
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import torch

from etc_fairseq.finetune.nextsent.metrics import random_baseline, rank_scores, summarize
from etc_fairseq.finetune.nextsent.schema import (
    Article,
    NextSentRecord,
    make_records,
    question_pool,
    record_from_json,
    record_to_json,
    split_articles,
    swap_questions,
    word_overlap_ranking,
)
from etc_fairseq.prepare.documents import InputFormatError
from etc_fairseq.structure.global_tokens import GlobalTokenType as T
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def articles(wiki_dump):
    from etc_fairseq.finetune.nextsent.convert import read_articles

    return read_articles(wiki_dump)


# ---------------------------------------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------------------------------------
def test_records_deterministic_heldout_and_answer_follows_question(articles):
    assert len(articles) == 98
    train_a, held_a = split_articles(articles, 0.2, seed=5)
    assert len(held_a) == 20 and len(train_a) == 78
    assert not {a.title for a in train_a} & {a.title for a in held_a}
    # the split and the records are functions of the seed
    assert [a.title for a in split_articles(articles, 0.2, seed=5)[1]] == [a.title for a in held_a]
    assert [a.title for a in split_articles(articles, 0.2, seed=6)[1]] != [a.title for a in held_a]
    recs = make_records(held_a, 30, "valid", seed=5)
    again = make_records(held_a, 30, "valid", seed=5)
    assert [record_to_json(r) for r in recs] == [record_to_json(r) for r in again]
    assert [record_to_json(r) for r in make_records(held_a, 30, "valid", seed=7)] != [record_to_json(r) for r in recs]
    by_title = {a.title: a for a in articles}
    held_titles = {a.title for a in held_a}
    for r in recs:
        # every paragraph comes from a held-out article
        assert {t for t, _ in r.paragraphs} <= held_titles
        # the question and its answer are consecutive sentences of one real paragraph of the article
        p, s = r.answer
        title, sents = r.paragraphs[p]
        assert title == r.article
        # the record's paragraph is a real paragraph of the article with the question removed at index s,
        # so the answer (now at s) is the sentence that followed it
        assert any(list(para[:s]) + list(para[s + 1:]) == sents and para[s] == r.question
                   for para in by_title[r.article].paragraphs)
        assert record_from_json(json.loads(json.dumps(record_to_json(r)))) == r
    # no question (hence no answer) repeats within a split: nothing is answerable from an earlier record
    train_recs = make_records(train_a, 300, "train", seed=5)
    assert len({r.question for r in train_recs}) == 300 and len({r.question for r in recs}) == 30
    # training records use training articles only (held-out ones only held-out articles, above)
    train_titles = {a.title for a in train_a}
    assert all({t for t, _ in r.paragraphs} <= train_titles for r in train_recs)
    # a bad record is one line naming where, the field, what was expected and what was found
    bad = dict(record_to_json(recs[0]), answer=[0, 99])
    with pytest.raises(InputFormatError, match=r"^gold.json: record 4 \(id '[^']+'\): field 'answer': expected "
                       r"\[paragraph index, sentence index\] into 'paragraphs', got \[0, 99\]$"):
        record_from_json(bad, "gold.json: record 4")
    with pytest.raises(InputFormatError, match=r"field 'paragraphs\[0\].sentences': expected a list of strings"):
        record_from_json(dict(bad, paragraphs=[{"title": "T", "sentences": "one"}]), "gold.json: record 4")
    # the default shape: 1 + up to 2 paragraphs of the article, 2 paragraphs of each of 4 distractors
    assert Counter(len({t for t, _ in r.paragraphs}) for r in recs) == {5: 30}
    with pytest.raises(ValueError, match="need at least 5"):
        make_records(held_a[:4], 1, "valid", seed=1)


def test_support_is_the_sentence_before_the_gap(articles):
    """The support (what --support-loss-weight supervises) is the sentence the removed question followed in
    the task, and the copy itself in the next-of-copy probe; none when the answer opens its paragraph."""
    _, held_a = split_articles(articles, 0.2, seed=5)
    by_title = {a.title: a for a in articles}
    recs = make_records(held_a, 60, "valid", seed=5)
    assert {r.support is None for r in recs} == {True, False}  # both cases occur
    for r in recs:
        p, s = r.answer
        if s == 0:
            assert r.support is None
            continue
        assert r.support == (p, s - 1)
        before = r.paragraphs[p][1][s - 1]
        # in the article's real paragraph, the support is directly followed by the (removed) question
        assert any(para[s] == r.question and para[s - 1] == before for para in by_title[r.article].paragraphs
                   if len(para) > s)
    for r in make_records(held_a, 60, "valid", seed=5, probe="next-of-copy"):
        p, k = r.support
        assert r.paragraphs[p][1][k] == r.question


def test_tiny_record_by_hand():
    arts = [
        Article("A", (("a0.", "a1.", "a2."),)),
        Article("B", (("b0.",), ("b1.", "b2."))),
    ]
    (r,) = make_records(arts, 1, "x", seed=3, same_article=0, distractors=1, distractor_paragraphs=1)
    assert r.article == "A" and sorted(t for t, _ in r.paragraphs) == ["A", "B"]
    p, s = r.answer
    qi = ["a0.", "a1.", "a2."].index(r.question)
    assert r.paragraphs[p] == ("A", [x for x in ["a0.", "a1.", "a2."] if x != r.question])
    assert r.paragraphs[p][1][s] == ["a0.", "a1.", "a2."][qi + 1]
    assert r.paragraphs[1 - p] == ("B", ["b0."])  # the distractor's first paragraph


def test_questions_drawn_without_replacement_exact():
    arts = [
        Article("A", (("a0.", "a1.", "a2."), ("a3.", "a4.", "a5.", "a6."))),
        Article("B", (("b0.",), ("b1.", "b2."))),  # no paragraph of 3 sentences: no question
        Article("C", (("c0.", "a0.", "c1."),)),  # "a0." again: one question, its first occurrence (in A)
    ]
    assert question_pool(arts) == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (0, 1, 2), (2, 0, 0)]
    shape = dict(same_article=0, distractors=1, distractor_paragraphs=1)
    recs = make_records(arts, 6, "x", seed=3, **shape)
    # every question of the pool exactly once, each with the sentence that followed it
    assert sorted(r.question for r in recs) == ["a0.", "a1.", "a3.", "a4.", "a5.", "c0."]
    follows = {"a0.": "a1.", "a1.": "a2.", "a3.": "a4.", "a4.": "a5.", "a5.": "a6.", "c0.": "a0."}
    for r in recs:
        p, s = r.answer
        assert r.paragraphs[p][1][s] == follows[r.question]
    # a draw of fewer is a seeded subset, without repeats
    few = make_records(arts, 4, "x", seed=3, **shape)
    assert len({r.question for r in few}) == 4
    # the copy probe: the same questions, left in their paragraph; the answer is the question's own sentence
    probe = make_records(arts, 6, "x", seed=3, probe="copy", **shape)
    assert [r.question for r in probe] == [r.question for r in recs]
    paragraphs = {p for a in arts for p in a.paragraphs}
    for r in probe:
        p, s = r.answer
        assert r.paragraphs[p][1][s] == r.question and tuple(r.paragraphs[p][1]) in paragraphs
    # next-of-copy: the same questions and contexts, the answer the sentence after the copy
    nxt = make_records(arts, 6, "x", seed=3, probe="next-of-copy", **shape)
    assert [(r.question, r.paragraphs) for r in nxt] == [(r.question, r.paragraphs) for r in probe]
    for r in nxt:
        p, s = r.answer
        assert r.paragraphs[p][1][s - 1] == r.question and r.paragraphs[p][1][s] == follows[r.question]
    with pytest.raises(ValueError, match="probe must be one of copy, next-of-copy"):
        make_records(arts, 6, "x", seed=3, probe="next", **shape)
    # the control: each record with the next record's question, context and answer unchanged
    swapped = swap_questions(probe[:3])
    assert [r.question for r in swapped] == [probe[1].question, probe[2].question, probe[0].question]
    assert [(r.id, r.paragraphs, r.answer, r.article) for r in swapped] == [
        (r.id, r.paragraphs, r.answer, r.article) for r in probe[:3]]
    with pytest.raises(ValueError, match="at least 2 records"):
        swap_questions(probe[:1])
    # more records than questions: one clear error, no silent truncation or repetition
    with pytest.raises(ValueError, match=r"^x: 7 records requested but its 3 articles give only 6 distinct questions"):
        make_records(arts, 7, "x", seed=3, **shape)


# ---------------------------------------------------------------------------------------------------------
# metric
# ---------------------------------------------------------------------------------------------------------
def test_rank_scores_edge_cases():
    assert rank_scores([3.0, 1.0, 2.0], 0) == (1.0, 1.0)
    assert rank_scores([3.0, 1.0, 2.0], 2) == (0.0, 0.5)
    assert rank_scores([3.0, 1.0, 2.0], 1) == (0.0, pytest.approx(1 / 3))
    # ties are broken uniformly at random in expectation: a constant scorer is the random baseline
    acc, rr = rank_scores([0.0] * 4, 2)
    assert acc == 0.25 and rr == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    assert rank_scores([5.0, 1.0, 1.0], 1) == (0.0, pytest.approx((1 / 2 + 1 / 3) / 2))
    assert rank_scores([1.0], 0) == (1.0, 1.0)
    assert rank_scores([float("-inf"), 0.0], 1) == (1.0, 1.0)
    with pytest.raises(ValueError, match="out of range"):
        rank_scores([1.0], 1)
    with pytest.raises(ValueError, match="NaN"):
        rank_scores([float("nan"), 1.0], 1)
    assert random_baseline([1, 4]) == {
        "accuracy": pytest.approx(100 * (1 + 1 / 4) / 2),
        "mrr": pytest.approx(100 * (1 + (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4) / 2), "total": 2}
    assert summarize(0.0, 0.0, 0) == {"accuracy": 0.0, "mrr": 0.0, "total": 0}


def test_evaluate_scores_an_unscored_answer_zero(tmp_path):
    from etc_fairseq.finetune.nextsent.metrics import evaluate_files

    recs = [NextSentRecord("a", "q.", [("A", ["x.", "y.", "z."])], (0, 1), "A"),
            NextSentRecord("b", "q.", [("A", ["x.", "y."])], (0, 0), "A"),
            NextSentRecord("c", "q.", [("A", ["x.", "y."])], (0, 1), "A")]
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps([record_to_json(r) for r in recs]))
    pred = tmp_path / "pred.json"
    # a: answer ranked 2nd of the scored ones, the unscored one below; b: every sentence unscored (truncation
    # cut them all), so the answer scores 0, as in the criterion, not the random expectation; c: answer
    # unscored beside a scored sentence: 0
    pred.write_text(json.dumps({"a": [1.0, 0.5, None], "b": [None, None], "c": [0.1, None]}))
    got = evaluate_files(pred, gold)
    assert got == {"accuracy": 0.0, "mrr": pytest.approx(100 * 0.5 / 3), "total": 3, "missing": 0}


def test_criterion_rank_metrics_match_the_definition():
    from etc_fairseq.finetune.nextsent.criterion import rank_metrics

    gen = torch.Generator().manual_seed(0)
    logits = torch.randint(0, 3, (64, 6), generator=gen).float()  # many ties
    n = torch.randint(1, 7, (64,), generator=gen)
    logits[torch.arange(6).unsqueeze(0) >= n.unsqueeze(1)] = float("-inf")
    answer = (torch.rand(64, generator=gen) * n).long()
    answer[::7] = -1  # answer dropped by truncation: scores 0
    acc, rr = rank_metrics(logits, answer)
    for b in range(64):
        if answer[b] < 0:
            assert acc[b] == 0 and rr[b] == 0
            continue
        want = rank_scores(logits[b, : n[b]].tolist(), int(answer[b]))
        assert (float(acc[b]), float(rr[b])) == pytest.approx(want, abs=1e-6)


def test_word_overlap_baseline_counts_shared_content_words():
    r = NextSentRecord("x", "The river Thames flows through London.", [
        ("A", ["London is large.", "The Thames river is long in London."]), ("B", ["Nothing here."])], (0, 1), "A")
    assert word_overlap_ranking(r) == [1.0, 3.0, 0.0]
    assert r.answer_rank_index() == 1 and r.num_sentences == 3


# ---------------------------------------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(pretrain_data):
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    return WordPieceTokenizer.from_pretrain_dir(pretrain_data)


def _tiny_record():
    return NextSentRecord(
        "CONSTRUCTED_t_0",
        "His mother was the nymph Thetis.",
        [("Achilles", ["Achilles was a Greek hero.", "He fought at Troy."]), ("Paris", ["Paris is a city."])],
        (0, 1),
        "Achilles",
    )


def test_exact_layout_of_a_tiny_record(tokenizer):
    from etc_fairseq.finetune.nextsent.convert import convert_record

    rec = _tiny_record()
    enc = lambda text, first=True: tokenizer.encode_words(text.split(), first_is_start=first)[0]  # noqa: E731
    q = enc(rec.question)
    t0, s00, s01 = enc("Achilles"), enc("Achilles was a Greek hero."), enc("He fought at Troy.", False)
    t1, s10 = enc("Paris"), enc("Paris is a city.")
    bos = tokenizer.dictionary.bos()
    counts = Counter()
    a, side = convert_record(rec, tokenizer, 4096, 256, flat=False, no_globals=False, counts=counts)
    Q = len(q)
    assert a["long_tokens"].tolist() == [bos] + q + t0 + s00 + s01 + t1 + s10
    # global: CLS, Q question mirrors, then per paragraph CONTEXT, TITLE, SENTENCE...
    assert a["global_types"].tolist() == [T.CLS] + [T.QUESTION] * Q + [T.CONTEXT, T.TITLE, T.SENTENCE, T.SENTENCE,
                                                                        T.CONTEXT, T.TITLE, T.SENTENCE]
    assert a["global_tokens"].tolist() == [bos] + q + [bos] * 7
    ctx0, ti0, g00, g01, ctx1, ti1, g10 = range(Q + 1, Q + 8)
    assert a["global_parent"].tolist() == [-1] * (Q + 1) + [-1, ctx0, ctx0, ctx0, -1, ctx1, ctx1]
    assert a["global_context"].tolist() == [0] * (Q + 1) + [1] * 4 + [2] * 3
    assert a["long_segment"].tolist() == ([0] + list(range(1, Q + 1)) + [ti0] * len(t0) + [g00] * len(s00)
                                          + [g01] * len(s01) + [ti1] * len(t1) + [g10] * len(s10))
    assert a["long_context"].tolist() == [0] * (Q + 1) + [1] * (len(t0) + len(s00) + len(s01)) + [2] * (len(t1) + len(s10))
    assert a["long_sentence"].tolist() == ([-1] * (Q + 1 + len(t0)) + [0] * len(s00) + [1] * len(s01)
                                           + [-1] * len(t1) + [2] * len(s10))
    assert a["answer_index"].tolist() == [1] and a["num_sentences"].tolist() == [3]
    assert a["support_index"].tolist() == [0]  # the sentence before the answer in its paragraph
    assert side == {"id": rec.id, "sentences": [[0, 0], [0, 1], [1, 0]], "paragraph_sizes": [2, 1]}
    assert counts["answers_dropped"] == 0 and counts["truncated"] == 0
    assert counts["answer_distance"] == 1 + Q + len(t0) + len(s00)

    # the flat ablation: same tokens, no CONTEXT tokens, no parents, one context
    f, _ = convert_record(rec, tokenizer, 4096, 256, flat=True, no_globals=False, counts=Counter())
    assert f["long_tokens"].tolist() == a["long_tokens"].tolist()
    assert T.CONTEXT not in f["global_types"].tolist() and (f["global_parent"] == -1).all()
    assert (f["long_context"] == 0).all() and (f["global_context"] == 0).all()
    # the no-globals ablation: only the CLS global token
    n, _ = convert_record(rec, tokenizer, 4096, 256, flat=False, no_globals=True, counts=Counter())
    assert n["long_tokens"].tolist() == a["long_tokens"].tolist()
    assert n["global_types"].tolist() == [T.CLS] and (n["long_segment"] == 0).all()
    assert n["long_sentence"].tolist() == a["long_sentence"].tolist()

    # truncation that drops the answer is counted and marks the example (the long budget ends after s00)
    c = Counter()
    cut, side = convert_record(rec, tokenizer, 1 + Q + len(t0) + len(s00), 256, False, False, c)
    assert cut["answer_index"].tolist() == [-1] and cut["num_sentences"].tolist() == [1]
    assert cut["support_index"].tolist() == [0]  # kept: only the answer was cut
    opening = NextSentRecord(rec.id, rec.question, rec.paragraphs, (1, 0), "Paris")
    o, _ = convert_record(opening, tokenizer, 4096, 256, False, False, Counter())
    assert o["answer_index"].tolist() == [2] and o["support_index"].tolist() == [-1]  # opens its paragraph
    assert side["sentences"] == [[0, 0]]
    assert c["answers_dropped"] == 1 and c["truncated"] == 1


# ---------------------------------------------------------------------------------------------------------
# end to end
# ---------------------------------------------------------------------------------------------------------
def test_end_to_end(tmp_path, wiki_dump, pretrain_data, capsys):
    from etc_fairseq.cli.evaluate import main as evaluate_main
    from etc_fairseq.cli.predict import main as predict_main
    from etc_fairseq.cli.prepare import main as prepare_main

    data = tmp_path / "data"
    assert prepare_main([
        "nextsent", "--dump", str(wiki_dump), "--train", "12", "--valid", "6", "--seed", "2",
        "--out", str(data), "--pretrain-dir", str(pretrain_data), "--max-long-len", "1024", "--max-global-len", "128",
        "--distractors", "2", "--distractor-paragraphs", "1", "--same-article", "1",
    ]) == 0
    out = capsys.readouterr().out
    assert "CONSTRUCTED" in out
    meta = json.loads((data / "valid.meta.json").read_text())
    assert meta["num_examples"] == 6 and meta["counts"]["records"] == 6
    info = json.loads((data / "prepare.json").read_text())
    assert not set(info["articles"]["train"]) & set(info["articles"]["valid"])
    assert info["probe"] is None and set(info["questions_available"]) == {"train", "valid"}
    assert re.search(r"distinct questions \(each used at most once\): train 12 of \d+, valid 6 of \d+", out)
    valid_records = [record_from_json(d) for d in json.loads((data / "valid.records.json").read_text())]
    assert all({t for t, _ in r.paragraphs} <= set(info["articles"]["valid"]) for r in valid_records)

    common = ["--user-dir", str(REPO / "user_dir"), "--task", "etc_nextsent", "--criterion", "etc_nextsent",
              "--max-long-len", "1024", "--max-global-len", "128", "--cpu", "--num-workers", "0",
              "--required-batch-size-multiple", "1"]
    save = tmp_path / "ckpt"
    train = run_python(
        ["-m", "fairseq_cli.train", str(data), *common, "--arch", "etc_tiny",
         "--max-global-positions", "128", "--batch-size", "4", "--optimizer", "adam", "--lr", "1e-3",
         "--lr-scheduler", "fixed", "--max-update", "3", "--seed", "1", "--no-epoch-checkpoints",
         "--disable-validation", "--log-format", "simple", "--log-interval", "1", "--save-dir", str(save)],
        cwd=REPO, timeout=600,
    )
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    log = train.stdout + train.stderr
    assert re.search(r"num_updates=3\b", log) and re.search(r"mrr=[\d.]+", log)
    ckpt = save / "checkpoint_last.pt"
    valid = run_python(
        ["-m", "fairseq_cli.validate", str(data), *common, "--path", str(ckpt),
         "--valid-subset", "valid", "--batch-size", "1"],
        cwd=REPO, timeout=600,
    )
    assert valid.returncode == 0, valid.stdout[-3000:] + valid.stderr[-3000:]
    m = re.search(r"valid on 'valid' subset .*\| accuracy ([\d.]+) \| mrr ([\d.]+)", valid.stdout + valid.stderr)
    assert m, (valid.stdout + valid.stderr)[-2000:]
    v_acc, v_mrr = float(m.group(1)), float(m.group(2))

    pred = tmp_path / "pred.json"
    # one example per batch, as fairseq-validate above: a model after 3 updates scores sentences nearly alike,
    # and other batch company (other padding) changes the last bits of the scores, hence how near-ties rank
    assert predict_main(["nextsent", "--path", str(ckpt), "--data", str(data), "--split", "valid",
                         "--output", str(pred), "--batch-size", "1", "--device", "cpu"]) == 0
    preds = json.loads(pred.read_text())
    assert set(preds) == {r.id for r in valid_records}
    assert all(len(preds[r.id]) == r.num_sentences for r in valid_records)
    capsys.readouterr()
    metrics_file = tmp_path / "metrics.json"
    assert evaluate_main(["nextsent", "--predictions", str(pred), "--gold", str(data / "valid.records.json"),
                          "--output", str(metrics_file)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert json.loads(metrics_file.read_text()) == scores
    assert scores["total"] == 6 and scores["missing"] == 0
    # fairseq-validate (criterion) and etc-evaluate (the metric on the prediction file) agree
    assert scores["accuracy"] == pytest.approx(v_acc, abs=1e-3) and scores["mrr"] == pytest.approx(v_mrr, abs=1e-3)


def _prepare_small(data, wiki_dump, pretrain_data, valid, *extra):
    """A small nextsent split (4 training records, ``valid`` held-out) with the test data's tokenizer."""
    from etc_fairseq.cli.prepare import main as prepare_main

    assert prepare_main(["nextsent", "--dump", str(wiki_dump), "--train", "4", "--valid", str(valid), "--seed", "2",
                         "--out", str(data), "--pretrain-dir", str(pretrain_data), "--max-long-len", "1024",
                         "--max-global-len", "128", "--distractors", "2", "--distractor-paragraphs", "1",
                         "--same-article", "1", "--no-progress-bar", *extra]) == 0


def _tiny_task_model_sample(data, **task_cfg):
    """(task, etc_tiny model in eval mode with the task's heads, the whole valid split as one batch)."""
    from etc_fairseq.finetune.nextsent.task import EtcNextSentConfig, EtcNextSentTask
    from etc_fairseq.models import config_for_arch

    task = EtcNextSentTask.setup_task(EtcNextSentConfig(data=str(data), max_long_len=1024, max_global_len=128,
                                                        seed=1, **task_cfg))
    ds = task.load_dataset("valid")
    torch.manual_seed(1)
    model = task.build_model(config_for_arch("etc_tiny", dropout=0.0, attention_dropout=0.0))
    model.eval()
    return task, model, ds.collater([ds[i] for i in range(len(ds))])


def test_support_loss_adds_the_support_heads_cross_entropy(tmp_path, wiki_dump, pretrain_data):
    """--support-loss-weight W: a second head, and loss = answer cross-entropy + W x support cross-entropy
    (summed over examples), with support_accuracy logged; refused clearly without the field or with W < 0."""
    import torch.nn.functional as F

    from etc_fairseq.finetune.nextsent.criterion import EtcNextSentCriterion, EtcNextSentCriterionConfig
    from etc_fairseq.finetune.nextsent.decode import SENTENCE_HEAD, SUPPORT_HEAD

    data = tmp_path / "data"
    _prepare_small(data, wiki_dump, pretrain_data, 8, "--probe", "next-of-copy")

    def setup(weight):
        return _tiny_task_model_sample(data, support_loss_weight=weight)

    task, model, sample = setup(0.5)
    assert set(model.task_heads) == {SENTENCE_HEAD, SUPPORT_HEAD}
    support = sample["target"]["support_index"][:, 0]
    answer = sample["target"]["answer_index"][:, 0]
    kept = answer.ge(0)
    # next-of-copy: the support (the copy) is the sentence right before the answer
    assert torch.equal(support[kept], answer[kept] - 1)
    crit = EtcNextSentCriterion(EtcNextSentCriterionConfig(support_loss_weight=0.5), task)
    with torch.no_grad():
        loss, n, log = crit(model, sample)
        features, extra = task.forward_features(model, sample)
        expected = 0.0
        for head, target, w in ((SENTENCE_HEAD, answer, 1.0), (SUPPORT_HEAD, support, 0.5)):
            scores = model.task_heads[head](extra["global_features"]).squeeze(-1)  # [B, G]
            for b in range(len(target)):
                if target[b] < 0:
                    continue
                is_sentence = sample["net_input"]["global_types"][b].eq(int(T.SENTENCE))
                expected += w * -F.log_softmax(scores[b][is_sentence].float(), dim=-1)[target[b]]
    assert n == int(kept.sum())
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    assert log["support_n"] == int(support.ge(0).sum()) > 0

    # without the weight: one head, and the same answer loss alone
    task0, model0, _ = setup(0.0)
    assert set(model0.task_heads) == {SENTENCE_HEAD}
    model0.load_state_dict({k: v for k, v in model.state_dict().items() if SUPPORT_HEAD not in k})
    with torch.no_grad():
        loss0, _, log0 = EtcNextSentCriterion(EtcNextSentCriterionConfig(support_loss_weight=0.0), task0)(model0, sample)
    assert "support_n" not in log0 and float(loss0) < float(loss)

    no_field = dict(sample, target={k: v for k, v in sample["target"].items() if k != "support_index"})
    with pytest.raises(ValueError, match=r"--support-loss-weight needs the support_index field, and the data in .* was prepared without it"):
        crit(model, no_field)
    with pytest.raises(ValueError, match=r"--support-loss-weight: expected a weight >= 0, got -1.0"):
        setup(-1.0)


def test_question_mean_and_scaled_cosine_on_exact_small_matrices():
    """question_mean averages long positions 1 .. question_len (after the CLS); scaled_cosine is scale x cos."""
    from etc_fairseq.encoder.heads import QueryCosineScorer, scaled_cosine
    from etc_fairseq.finetune.common.selection import question_mean

    features = torch.tensor([[[9.0, 9.0], [1.0, 0.0], [3.0, 2.0], [7.0, 7.0]],
                             [[9.0, 9.0], [0.0, 4.0], [5.0, 5.0], [5.0, 5.0]]])  # [2, 4, 2]
    q = question_mean(features, torch.tensor([2, 1]))
    assert torch.equal(q, torch.tensor([[2.0, 1.0], [0.0, 4.0]]))
    assert torch.equal(question_mean(features, torch.tensor([0, 0])), torch.zeros(2, 2))
    items = torch.tensor([[[3.0, 0.0], [0.0, 2.0], [0.0, 0.0]]])  # [1, 3, 2]
    got = scaled_cosine(items, torch.tensor([[1.0, 1.0]]), torch.tensor(10.0))
    assert torch.allclose(got, torch.tensor([[10 / 2 ** 0.5, 10 / 2 ** 0.5, 0.0]]))
    # the head starts as the plain scaled cosine: identity projections, the given scale
    head = QueryCosineScorer(2, init_scale=20.0)
    assert torch.allclose(head(items, torch.tensor([[1.0, 0.0]])), torch.tensor([[20.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="init_scale must be > 0"):
        QueryCosineScorer(2, init_scale=0.0)


def test_question_cosine_head_adds_the_scaled_cosine_to_the_answer_logits(tmp_path, wiki_dump, pretrain_data):
    """--question-cosine: a third head whose scaled cosine between each SENTENCE token's output (or each
    sentence's mean in --no-globals data) and the question's mean output is added to the answer head's logits;
    the data carries question_len = the question's pieces; refused clearly without
    the field."""
    from etc_fairseq.encoder.heads import scaled_cosine
    from etc_fairseq.finetune.nextsent.criterion import EtcNextSentCriterion, EtcNextSentCriterionConfig
    from etc_fairseq.finetune.nextsent.decode import QUESTION_HEAD, SENTENCE_HEAD, sentence_scores

    for layout in ([], ["--no-globals"]):
        data = tmp_path / f"data{len(layout)}"
        _prepare_small(data, wiki_dump, pretrain_data, 4, *layout)
        task, model, sample = _tiny_task_model_sample(data, question_cosine=True)
        assert set(model.task_heads) == {SENTENCE_HEAD, QUESTION_HEAD}
        types = sample["net_input"]["global_types"]
        qlen = sample["target"]["question_len"][:, 0]
        if not layout:  # one QUESTION global token per question piece in the long input
            assert torch.equal(qlen, types.eq(int(T.QUESTION)).sum(dim=1))
        assert bool(qlen.gt(0).all())
        with torch.no_grad():
            features, extra = task.forward_features(model, sample)
            logits, mask = sentence_scores(model, sample, features, extra)
            for b in range(len(qlen)):
                query = features[b, 1:1 + int(qlen[b])].mean(dim=0)  # [D]
                if layout:
                    ls = sample["target"]["long_sentence"][b]
                    vectors = torch.stack([features[b][ls.eq(k)].mean(dim=0)
                                           for k in range(int(sample["target"]["num_sentences"][b, 0]))])
                else:
                    vectors = extra["global_features"][b][types[b].eq(int(T.SENTENCE))]  # [S, D]
                qh = model.task_heads[QUESTION_HEAD]
                expected = (model.task_heads[SENTENCE_HEAD](vectors).squeeze(-1)
                            + scaled_cosine(qh.item_proj(vectors)[None], qh.query_proj(query)[None],
                                            qh.log_scale.exp())[0])
                assert torch.allclose(logits[b][mask[b]], expected.float(), atol=1e-4)
        no_field = dict(sample, target={k: v for k, v in sample["target"].items() if k != "question_len"})
        with pytest.raises(ValueError, match=r"--question-cosine needs the question_len field"):
            EtcNextSentCriterion(EtcNextSentCriterionConfig(), task)(model, no_field)
