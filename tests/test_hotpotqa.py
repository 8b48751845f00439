"""HotpotQA: official-format input -> layout -> fairseq task/criterion -> etc-predict -> etc-evaluate.

The HotpotQA-format files here are CONSTRUCTED: their paragraphs are real English Wikipedia text (the first
sentences of real articles of the ``wiki_dump`` fixture, titles = article titles), and the questions,
answers and supporting facts were written for these tests.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "user_dir")

def _construct_module():
    """examples/hotpotqa/construct.py: CONSTRUCTED questions about real Wikipedia paragraphs."""
    from examples.hotpotqa import construct

    return construct


def constructed_records(dump_path):
    return _construct_module().constructed_records(dump_path)


# ------------------------------------------------------------------------------------------------------
# fixtures
# ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def records(wiki_dump):
    return constructed_records(wiki_dump)


@pytest.fixture(scope="module")
def files(records, tmp_path_factory):
    """train/valid (labelled) and test (no answers) CONSTRUCTED files in the official format."""
    d = tmp_path_factory.mktemp("hotpotqa_files")
    (d / "train.json").write_text(json.dumps(records), encoding="utf-8")
    (d / "dev.json").write_text(json.dumps(records[:4]), encoding="utf-8")
    test = [{k: r[k] for k in ("_id", "question", "context")} for r in records]
    (d / "test.json").write_text(json.dumps(test), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def tokenizer(pretrain_data):
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    return WordPieceTokenizer.from_pretrain_dir(pretrain_data)


@pytest.fixture(scope="module")
def prepared(files, pretrain_data, tmp_path_factory):
    from etc_fairseq.cli.prepare import main

    out = tmp_path_factory.mktemp("hotpotqa_prepared") / "data"
    rc = main(["hotpotqa", "--train", str(files / "train.json"), "--valid", str(files / "dev.json"),
               "--test", str(files / "test.json"), "--out", str(out), "--pretrain-dir", str(pretrain_data)])
    assert rc == 0
    return out


def fresh_dictionary():
    from fairseq.data import Dictionary

    return Dictionary()  # <s>=0, <pad>=1, </s>=2, <unk>=3


# ------------------------------------------------------------------------------------------------------
# layout on hand-made ids (exact)
# ------------------------------------------------------------------------------------------------------

QUESTION = [10, 11]
PARAGRAPHS = [([20], [[21, 22], [23]]), ([30, 31], [[32]])]


def test_layout_exact():
    from etc_fairseq.finetune.common.layout import Unit, layout_example

    lay = layout_example(QUESTION, PARAGRAPHS, fresh_dictionary())
    assert lay.long_tokens.tolist() == [0, 10, 11, 20, 21, 22, 23, 30, 31, 32]
    # CLS, Q, Q, CONTEXT, TITLE, SENT, SENT, CONTEXT, TITLE, SENT
    assert lay.global_tokens.tolist() == [0, 10, 11, 0, 0, 0, 0, 0, 0, 0]
    assert lay.global_types.tolist() == [1, 2, 2, 5, 6, 3, 3, 5, 6, 3]
    assert lay.global_parent.tolist() == [-1, -1, -1, -1, 3, 3, 3, -1, 7, 7]
    assert lay.global_context.tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    assert lay.long_segment.tolist() == [0, 1, 2, 4, 5, 5, 6, 8, 8, 9]
    assert lay.long_context.tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    assert lay.units == [Unit(0, -1, 4, 3, 4), Unit(0, 0, 5, 4, 6), Unit(0, 1, 6, 6, 7), Unit(1, -1, 8, 7, 9),
                         Unit(1, 0, 9, 9, 10)]
    assert not lay.truncated


def _build(lay, hard_g2l=False, r=2):
    from etc_fairseq.structure import RelativeLabelVocab, build_structure

    vocab = RelativeLabelVocab(2)
    t = lambda a: torch.as_tensor(a).unsqueeze(0)  # noqa: E731  [1, len]
    s = build_structure(
        long_padding_mask=torch.zeros(1, len(lay.long_tokens), dtype=torch.bool),
        global_padding_mask=torch.zeros(1, len(lay.global_tokens), dtype=torch.bool),
        vocab=vocab, local_radius=r, hard_g2l=hard_g2l,
        long_segment=t(lay.long_segment), global_parent=t(lay.global_parent),
        long_context=t(lay.long_context), global_context=t(lay.global_context),
    )
    return s, vocab


def test_layout_structure_labels_and_masks():
    from etc_fairseq.finetune.common.layout import layout_example

    lay = layout_example(QUESTION, PARAGRAPHS, fresh_dictionary())
    s, v = _build(lay)
    r = 2
    # l2l [i, w] with key j = i + w - r: cut at paragraph boundaries
    assert not s.l2l_mask[0, 3, -1 + r]  # title of paragraph 0 -> question piece (context 1 vs 0)
    assert s.l2l_mask[0, 4, 1 + r] and s.l2l_rel[0, 4, 1 + r] == v.label("pos+1")  # sentence piece -> next
    assert not s.l2l_mask[0, 6, 1 + r]  # last piece of paragraph 0 -> first of paragraph 1
    assert s.l2l_mask[0, 8, -1 + r] and s.l2l_rel[0, 8, -1 + r] == v.label("pos-1")
    # l2g: a sentence piece belongs to its sentence and its paragraph token, not to the title or others
    assert s.l2g_rel[0, 4, 5] == v.label("belongs")
    assert s.l2g_rel[0, 4, 3] == v.label("belongs")
    assert s.l2g_rel[0, 4, 4] == v.label("not_belongs")
    assert s.l2g_rel[0, 4, 9] == v.label("not_belongs")
    assert s.l2g_rel[0, 1, 1] == v.label("belongs") and s.l2g_rel[0, 1, 2] == v.label("not_belongs")
    assert s.l2g_rel[0, 0, 0] == v.label("belongs")  # long CLS -> global CLS
    # g2g: hierarchy, order inside a paragraph, unordered paragraphs
    assert s.g2g_rel[0, 5, 3] == v.label("parent") and s.g2g_rel[0, 3, 5] == v.label("child")
    assert s.g2g_rel[0, 4, 3] == v.label("parent")
    assert s.g2g_rel[0, 5, 6] == v.label("pos+1") and s.g2g_rel[0, 4, 6] == v.label("pos+2")
    assert s.g2g_rel[0, 5, 9] == v.label("other_context") and s.g2g_rel[0, 3, 7] == v.label("other_context")
    assert s.g2g_rel[0, 1, 2] == v.label("pos+1") and s.g2g_rel[0, 0, 5] == v.label("other_context")
    assert bool(s.g2g_mask.all())
    # soft g2l sees everything; hard g2l only what a token summarises
    assert bool(s.g2l_mask.all())
    h, _ = _build(lay, hard_g2l=True)
    assert h.g2l_mask[0, 3].tolist() == [False, False, False, True, True, True, True, False, False, False]
    assert h.g2l_mask[0, 5].tolist() == [False] * 4 + [True, True] + [False] * 4
    assert h.g2l_mask[0, 0].tolist() == [True] + [False] * 9
    assert h.g2l_mask[0, 2].tolist() == [False, False, True] + [False] * 7


def test_flat_structure_layout():
    from etc_fairseq.finetune.common.layout import Unit, layout_example

    lay = layout_example(QUESTION, PARAGRAPHS, fresh_dictionary(), flat=True)
    assert lay.long_tokens.tolist() == [0, 10, 11, 20, 21, 22, 23, 30, 31, 32]
    # CLS, Q, Q, TITLE, SENT, SENT, TITLE, SENT: no paragraph tokens, no parents, one context
    assert lay.global_types.tolist() == [1, 2, 2, 6, 3, 3, 6, 3]
    assert lay.global_parent.tolist() == [-1] * 8
    assert lay.global_context.tolist() == [0] * 8 and lay.long_context.tolist() == [0] * 10
    assert lay.long_segment.tolist() == [0, 1, 2, 3, 4, 4, 5, 6, 6, 7]
    assert lay.units[3] == Unit(1, -1, 6, 7, 9)
    s, v = _build(lay)
    assert s.l2l_mask[0, 6, 1 + 2]  # no cut between paragraphs
    assert s.l2g_rel[0, 4, 4] == v.label("belongs") and s.l2g_rel[0, 4, 3] == v.label("not_belongs")
    assert s.g2g_rel[0, 4, 7] == v.label("pos+2")  # ordered across paragraphs (clipped at k = 2)


def test_truncation_counts():
    from etc_fairseq.finetune.common.layout import layout_example

    d = fresh_dictionary()
    # long budget 8: q (3 with CLS), p0 title + both sentences (7); p1's title (2 pieces) no longer fits
    lay = layout_example(QUESTION, PARAGRAPHS, d, max_long_len=8)
    assert lay.long_tokens.tolist() == [0, 10, 11, 20, 21, 22, 23]
    assert (lay.paragraphs_dropped, lay.sentences_dropped, lay.question_pieces_cut) == (1, 1, 0) and lay.truncated
    # global budget 6: CLS Q Q CONTEXT TITLE SENT; the second sentence and paragraph 1 do not fit
    lay = layout_example(QUESTION, PARAGRAPHS, d, max_global_len=6)
    assert lay.global_types.tolist() == [1, 2, 2, 5, 6, 3]
    assert lay.long_tokens.tolist() == [0, 10, 11, 20, 21, 22]
    assert (lay.paragraphs_dropped, lay.sentences_dropped) == (1, 2)
    # a long first sentence is skipped, the later shorter one still fits
    lay = layout_example(QUESTION, [([20], [[21, 22, 24, 25], [23]])], d, max_long_len=6)
    assert lay.long_tokens.tolist() == [0, 10, 11, 20, 23] and [u.sentence for u in lay.units] == [-1, 1]
    assert lay.sentences_dropped == 1
    # the question alone is cut to fit
    lay = layout_example(QUESTION, PARAGRAPHS, d, max_global_len=2)
    assert lay.long_tokens.tolist() == [0, 10] and lay.question_pieces_cut == 1 and lay.paragraphs_dropped == 2


def test_find_answer_words_normalised_first_occurrence_in_preferred_order():
    from etc_fairseq.finetune.hotpotqa.convert import find_answer_words

    units = [["The", "Eiffel", "Tower,", "Paris."], ["in", "Paris", "France"], ["Paris-based"]]
    assert find_answer_words(units, "Paris", [0, 1, 2]) == (0, 3, 3)
    assert find_answer_words(units, "Paris", [1, 0]) == (1, 1, 1)
    assert find_answer_words(units, "the eiffel tower", [0]) == (0, 1, 2)  # article dropped, not spanned
    assert find_answer_words(units, "Paris France", [0, 1]) == (1, 1, 2)
    assert find_answer_words(units, "London", [0, 1, 2]) is None
    assert find_answer_words(units, "The", [0, 1, 2]) is None


# ------------------------------------------------------------------------------------------------------
# metrics (official definitions, hand-checked)
# ------------------------------------------------------------------------------------------------------


def test_text_normalisation_and_token_f1():
    from etc_fairseq.text import exact_match, normalize_answer, token_prf

    assert normalize_answer("  The Eiffel-Tower, an  icon!") == "eiffeltower icon"
    assert normalize_answer("Theatre a") == "theatre"  # articles only as whole words
    assert exact_match("the Beatles.", "Beatles") == 1.0 and exact_match("Beatles band", "Beatles") == 0.0
    assert token_prf("Paris France", "Paris") == (0.5, 1.0, pytest.approx(2 / 3))
    assert token_prf("x b b", "b b c d") == (pytest.approx(2 / 3), 0.5, pytest.approx(4 / 7))
    assert token_prf("a b b", "b b c d")[0] == 1.0  # "a" is an article: dropped
    assert token_prf("", "Paris") == (0.0, 0.0, 0.0) and token_prf("London", "Paris") == (0.0, 0.0, 0.0)


def test_answer_scores_yes_no_noanswer_rule():
    from etc_fairseq.finetune.hotpotqa.metrics import answer_scores

    assert answer_scores("Yes.", "yes") == {"em": 1.0, "f1": 1.0, "prec": 1.0, "recall": 1.0}
    assert answer_scores("yes", "no") == {"em": 0.0, "f1": 0.0, "prec": 0.0, "recall": 0.0}
    # overlap would give F1 2/3, but a special answer that differs scores 0
    assert answer_scores("yes", "yes sir")["f1"] == 0.0
    assert answer_scores("no way", "no")["f1"] == 0.0
    assert answer_scores("noanswer", "no answer")["f1"] == 0.0
    assert answer_scores("the answer sir", "answer")["f1"] == pytest.approx(2 / 3)


def test_sp_and_joint_scores():
    from etc_fairseq.finetune.hotpotqa.metrics import answer_scores, joint_scores, sp_scores

    sp = sp_scores([["A", 0], ["B", 1], ["A", 0]], [["A", 0], ["A", 1]])  # duplicates count once
    assert sp == {"sp_em": 0.0, "sp_f1": 0.5, "sp_prec": 0.5, "sp_recall": 0.5}
    assert sp_scores([], [["A", 0]]) == {"sp_em": 0.0, "sp_f1": 0.0, "sp_prec": 0.0, "sp_recall": 0.0}
    assert sp_scores([], []) == {"sp_em": 1.0, "sp_f1": 0.0, "sp_prec": 0.0, "sp_recall": 0.0}
    assert sp_scores([["A", 1], ["A", 0]], [("A", 0), ("A", 1)])["sp_em"] == 1.0
    assert sp_scores([["A", "1"]], [["A", 1]])["sp_em"] == 1.0  # index compared as int
    ans = answer_scores("Paris France", "Paris")  # p 1/2, r 1
    j = joint_scores(ans, sp)  # p 1/4, r 1/2 -> F1 = 2 * 1/8 / (3/4) = 1/3
    assert j == {"joint_em": 0.0, "joint_f1": pytest.approx(1 / 3), "joint_prec": 0.25, "joint_recall": 0.5}
    assert joint_scores(answer_scores("yes", "no"), sp)["joint_f1"] == 0.0


def test_evaluate_averages_over_gold_and_missing_predictions_score_zero():
    from etc_fairseq.finetune.hotpotqa.metrics import evaluate
    from etc_fairseq.finetune.hotpotqa.schema import Gold

    gold = [
        Gold("a", "Paris", [("A", 0), ("A", 1)]),
        Gold("b", "yes", [("B", 0)]),
        Gold("c", "Rome", [("C", 2)]),
    ]
    pred = {
        "answer": {"a": "Paris France", "b": "yes", "extra": "ignored"},
        "sp": {"a": [["A", 0], ["B", 1]], "c": [["C", 2]]},
    }
    m = evaluate(pred, gold)
    # a: ans em 0 f1 2/3 p 1/2 r 1; sp em 0 f1 1/2 p 1/2 r 1/2; joint p 1/4 r 1/2 f1 1/3
    # b: ans em 1 f1 1; sp missing -> 0, joint 0.  c: answer missing -> 0; sp em 1 f1 1; joint 0
    assert m["n"] == 3 and m["missing_answer"] == 1 and m["missing_sp"] == 1
    assert m["em"] == pytest.approx(1 / 3) and m["f1"] == pytest.approx((2 / 3 + 1) / 3)
    assert m["prec"] == pytest.approx(1.5 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert m["sp_em"] == pytest.approx(1 / 3) and m["sp_f1"] == pytest.approx(1.5 / 3)
    assert m["joint_em"] == 0.0 and m["joint_f1"] == pytest.approx((1 / 3) / 3)
    assert m["joint_prec"] == pytest.approx(0.25 / 3) and m["joint_recall"] == pytest.approx(0.5 / 3)


# ------------------------------------------------------------------------------------------------------
# span decoding (appendix C rules)
# ------------------------------------------------------------------------------------------------------


def test_best_span_rules():
    from etc_fairseq.finetune.common.spans import best_span, best_span_in_range, log_softmax, select_above_threshold

    start = np.log(np.array([0.05, 0.5, 0.1, 0.05, 0.3]))
    end = np.log(np.array([0.6, 0.05, 0.05, 0.2, 0.1]))
    # end may not precede start: (1, 0) is excluded; best is start 1, end 3 (0.5 * 0.2)
    score, s, e = best_span_in_range(start, end, 0, 5, max_len=30)
    assert (s, e) == (1, 3) and score == pytest.approx(np.log(0.1))
    # at most 2 tokens: (1, 2) 0.025 vs (4, 4) 0.03 vs (0, 0) 0.03 -> first maximum (0, 0)
    assert best_span_in_range(start, end, 0, 5, max_len=2)[1:] == (0, 0)
    assert best_span_in_range(start, end, 1, 3, max_len=30)[1:] == (1, 1)  # inside [1, 3) only
    assert best_span_in_range(start, end, 2, 2, 30) is None
    # start and end in the same unit: units [0, 2) and [2, 5): (1, 3) crosses, so the best is (4, 4) 0.03
    assert best_span(start, end, [(0, 2), (2, 5)], max_len=30)[1:] == (0, 0)  # 0.05*0.6 = 0.03 ties, earlier unit
    assert best_span(start, end, [(2, 5), (0, 2)], max_len=30)[1:] == (4, 4)
    assert best_span(start, end, [(3, 3)], 30) is None
    with pytest.raises(ValueError):
        best_span_in_range(start, end, 0, 5, max_len=0)
    assert np.exp(log_softmax(np.array([1.0, 1.0, -np.inf]))) == pytest.approx([0.5, 0.5, 0.0])
    assert select_above_threshold([0.4, 0.39, 0.9, 0.1], 0.4) == [0, 2]


def _side():
    # CONSTRUCTED side record: paragraph 0 "Alpha" (title at long 1, sentences at 2-4 and 4-6),
    # paragraph 1 "Beta" (title at 6-7, sentence at 7-9)
    return {
        "id": "x", "titles": ["Alpha", "Beta"],
        "units": [[0, -1, 2, 1, 2], [0, 0, 3, 2, 4], [0, 1, 4, 4, 6], [1, -1, 6, 6, 7], [1, 0, 7, 7, 9]],
        "words": [["Alpha"], ["Alpha", "rocks."], ["It", "is"], ["Beta"], ["Beta", "rolls"]],
        "word_of_piece": [[0], [0, 1], [0, 1], [0], [0, 1]],
    }


def test_decode_example_rules():
    from etc_fairseq.finetune.hotpotqa.decode import decode_example

    side = _side()
    sp_probs = np.array([0, 0, 0, 0.7, 0.2, 0, 0, 0.45])  # sentence tokens 3, 4, 7
    span_type = np.array([2.0, 0.0, 0.0])
    start = np.log(np.array([0.01, 0.04, 0.05, 0.05, 0.05, 0.05, 0.05, 0.6, 0.1]))
    end = np.log(np.array([0.01, 0.04, 0.05, 0.3, 0.05, 0.05, 0.05, 0.05, 0.4]))
    # threshold 0.5: only Alpha s0 -> allowed: Alpha s0 and Alpha's title; best (2, 3): "Alpha rocks."
    a, sp, fb = decode_example(side, sp_probs, span_type, start, end, 0.5)
    assert (a, sp, fb) == ("Alpha rocks.", [["Alpha", 0]], False)
    # threshold 0.4: Beta s0 too; its (7, 8) 0.6*0.4 wins: "Beta rolls"
    assert decode_example(side, sp_probs, span_type, start, end, 0.4)[:2] == ("Beta rolls", [["Alpha", 0], ["Beta", 0]])
    # at most 1 token: (8, 8) 0.1*0.4 = 0.04 beats (7, 7) 0.6*0.05 = 0.03 and (3, 3) 0.05*0.3 -> "rolls"
    assert decode_example(side, sp_probs, span_type, start, end, 0.4, max_answer_len=1)[0] == "rolls"
    # yes / no from the type head, sp unchanged
    assert decode_example(side, sp_probs, np.array([0.0, 3.0, 1.0]), start, end, 0.5)[:2] == ("yes", [["Alpha", 0]])
    assert decode_example(side, sp_probs, np.array([0.0, 1.0, 3.0]), start, end, 0.5)[0] == "no"
    # nothing above the threshold: empty sp, the span is searched everywhere (fallback)
    assert decode_example(side, sp_probs, span_type, start, end, 0.9) == ("Beta rolls", [], True)


# ------------------------------------------------------------------------------------------------------
# etc-prepare hotpotqa on the CONSTRUCTED files (real Wikipedia paragraphs, real tokenizer)
# ------------------------------------------------------------------------------------------------------


def _dataset(path, split):
    from etc_fairseq.finetune.hotpotqa.schema import target_fields
    from etc_fairseq.finetune.hotpotqa.task import HotpotqaDataset

    return HotpotqaDataset(path, split, target_fields(), pad_idx=1)


def test_prepared_layout_on_real_text(prepared, records, tokenizer):
    from etc_fairseq.structure import GlobalTokenType as T

    ds = _dataset(prepared, "valid")
    assert len(ds) == 4 and ds.meta["examples_truncated"] == 0 and ds.meta["answer_types"] == {"span": 2, "yes": 1, "no": 1, "none": 0}
    bos = tokenizer.dictionary.bos()
    for i, rec in enumerate(records[:4]):
        item = ds[i]
        side = item["side"]
        assert side["id"] == rec["_id"] and side["titles"] == [t for t, _ in rec["context"]]
        long, glob, types = item["long_tokens"].tolist(), item["global_tokens"].tolist(), item["global_types"].tolist()
        q, _ = tokenizer.encode_words(rec["question"].split())
        n = len(q)
        assert long[0] == bos and glob[0] == bos and types[0] == T.CLS
        assert long[1 : 1 + n] == q and glob[1 : 1 + n] == q and types[1 : 1 + n] == [T.QUESTION] * n
        assert item["long_segment"][: 1 + n].tolist() == list(range(1 + n))
        # every title and sentence, in order, right after the question; each under its own global token
        pos, g = 1 + n, 1 + n
        for p, (title, sents) in enumerate(rec["context"]):
            assert types[g : g + 2] == [T.CONTEXT, T.TITLE] and item["global_parent"][g + 1] == g
            ctx_token = g
            for k, text in enumerate([title] + sents):
                unit = side["units"][p * 4 + k]
                words = text.split()
                ids, _ = tokenizer.encode_words(words)
                gi = g + 1 + k
                assert unit == [p, k - 1, gi, pos, pos + len(ids)] and side["words"][p * 4 + k] == words
                assert long[pos : pos + len(ids)] == ids
                assert item["long_segment"][pos : pos + len(ids)].tolist() == [gi] * len(ids)
                assert item["long_context"][pos : pos + len(ids)].tolist() == [p + 1] * len(ids)
                assert types[gi] == (T.TITLE if k == 0 else T.SENTENCE) and item["global_parent"][gi] == ctx_token
                assert item["global_context"][gi] == p + 1
                pos += len(ids)
            g += 2 + len(sents)
        assert pos == len(long) and g == len(glob)
        # labels: supporting sentences 1, other sentences 0, non-sentence tokens -1
        gold = {(t, k) for t, k in rec["supporting_facts"]}
        want = [-1] * len(glob)
        for par, sent, gi, _, _ in side["units"]:
            if sent >= 0:
                want[gi] = int((side["titles"][par], sent) in gold)
        assert item["sp_label"].tolist() == want and want.count(1) == len(gold)
    # answers: type, and the span maps back to the answer words (preferring a supporting sentence)
    types = [int(ds[i]["answer_type"][0]) for i in range(4)]
    assert types == [0, 1, 0, 2]
    for i, (answer, title, sent) in ((0, ("Alabama", "Alabama", 2)), (2, ("Proxenus of Atarneus", "Aristotle", 1))):
        side, span = ds[i]["side"], ds[i]["answer_span"].tolist()
        u = next(j for j, x in enumerate(side["units"]) if side["titles"][x[0]] == title and x[1] == sent)
        lo = side["units"][u][3]
        wop = side["word_of_piece"][u]
        assert lo <= span[0] <= span[1] < side["units"][u][4]
        assert " ".join(side["words"][u][wop[span[0] - lo] : wop[span[1] - lo] + 1]) == answer
    assert ds[1]["answer_span"].tolist() == [-1, -1]  # yes answer: no span


def test_prepared_test_split_without_answers(prepared, pretrain_data):
    ds = _dataset(prepared, "test")
    assert len(ds) == 5 and ds.meta["answer_types"]["none"] == 5
    for i in range(5):
        item = ds[i]
        assert item["answer_type"].tolist() == [-1] and item["answer_span"].tolist() == [-1, -1]
        assert set(item["sp_label"].tolist()) == {-1}
        assert item["side"]["answer"] is None and item["side"]["supporting_facts"] is None
    info = json.loads((prepared / "prepare.json").read_text())
    assert set(info["splits"]) == {"train", "valid", "test"} and not info["flat_structure"]
    assert (prepared / "dict.txt").read_bytes() == (pretrain_data / "dict.txt").read_bytes()


def test_prepare_truncation_counts_and_flat(files, records, tokenizer, pretrain_data, tmp_path):
    from etc_fairseq.finetune.hotpotqa.convert import prepare_hotpotqa

    out = tmp_path / "trunc"
    summary = prepare_hotpotqa([("train", files / "train.json"), ("valid", files / "dev.json")], out, tokenizer,
                               max_long_len=300, max_global_len=40)
    for split, n_rec in (("train", 5), ("valid", 4)):
        c = summary[split]
        ds = _dataset(out, split)
        assert json.loads((out / f"{split}.meta.json").read_text())["sentences_dropped"] == c["sentences_dropped"]
        assert c["records"] == n_rec and c["examples"] + c["examples_skipped_answer_not_found"] == n_rec
        assert max(ds.long_sizes) <= 300 and max(ds.global_sizes) <= 40
        kept_sentences = sum(sum(1 for u in ds[i]["side"]["units"] if u[1] >= 0) for i in range(len(ds)))
        kept_ids = {ds[i]["side"]["id"] for i in range(len(ds))}
        total = sum(len(s) for r in records[:n_rec] if r["_id"] in kept_ids for _, s in r["context"])
        assert c["sentences_dropped"] >= total - kept_sentences > 0
        assert c["examples_truncated"] >= sum(ds[i]["side"]["truncated"] for i in range(len(ds))) > 0
    assert summary["valid"]["examples_skipped_answer_not_found"] == 0  # only train drops
    assert summary["train"]["examples_skipped_answer_not_found"] == summary["train"]["answers_not_found"]

    flat = tmp_path / "flat"
    prepare_hotpotqa([("valid", files / "dev.json")], flat, tokenizer, flat_structure=True)
    ds_flat = _dataset(flat, "valid")  # kept alive: items are views into its memory map
    item = ds_flat[0]
    assert 5 not in item["global_types"].tolist()  # no CONTEXT tokens
    assert set(item["global_parent"].tolist()) == {-1} and set(item["long_context"].tolist()) == {0}
    assert json.loads((flat / "prepare.json").read_text())["flat_structure"] is True


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda r: r.pop("question"), ["record 1 (_id c-lincoln)", "'question'"]),
        (lambda r: r.update(_id=7), ["record 1", "'_id'"]),
        (lambda r: r["context"].__setitem__(2, ["Title only"]), ["record 1 (_id c-lincoln)", "'context[2]'"]),
        (lambda r: r.update(supporting_facts=[["Alabama", "one"]]), ["(_id c-lincoln)", "'supporting_facts'"]),
        (lambda r: r.update(answer=["yes"]), ["(_id c-lincoln)", "'answer'"]),
    ],
)
def test_bad_record_is_one_line_error_naming_file_record_and_field(records, pretrain_data, tmp_path, capsys, mutate, expected):
    from etc_fairseq.cli.prepare import main

    bad = json.loads(json.dumps(records[:3]))
    mutate(bad[1])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    out = tmp_path / "out"
    assert main(["hotpotqa", "--valid", str(path), "--out", str(out), "--pretrain-dir", str(pretrain_data)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("etc-prepare hotpotqa: error:") and str(path) in err and len(err.splitlines()) == 1
    assert all(e in err for e in expected), err
    assert not out.exists()  # nothing half-written


def test_prepare_argument_errors(files, pretrain_data, tmp_path, capsys):
    from etc_fairseq.cli.prepare import main

    args = ["hotpotqa", "--out", str(tmp_path / "o"), "--pretrain-dir", str(pretrain_data)]
    assert main(args + ["--input", str(files / "dev.json")]) == 1
    assert "--input and --split must be given in pairs" in capsys.readouterr().err
    assert main(args) == 1
    assert "at least one input split" in capsys.readouterr().err
    (tmp_path / "notjson.json").write_text("[{")
    assert main(args + ["--valid", str(tmp_path / "notjson.json")]) == 1
    assert "notjson.json: not valid JSON" in capsys.readouterr().err
    # --input/--split pairs work too (any split names)
    assert main(args + ["--input", str(files / "dev.json"), "--split", "dev2"]) == 0
    assert json.loads((tmp_path / "o" / "dev2.meta.json").read_text())["num_examples"] == 4


# ------------------------------------------------------------------------------------------------------
# etc-evaluate on files
# ------------------------------------------------------------------------------------------------------


def _evaluate(pred, gold_path, tmp_path, capsys):
    from etc_fairseq.cli.evaluate import main

    p = tmp_path / "pred.json"
    p.write_text(json.dumps(pred))
    assert main(["hotpotqa", "--predictions", str(p), "--gold", str(gold_path)]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_evaluate_cli_gold_equals_prediction_and_hand_computed_partial(records, files, tmp_path, capsys):
    gold_path = files / "train.json"
    perfect = {"answer": {r["_id"]: r["answer"] for r in records}, "sp": {r["_id"]: r["supporting_facts"] for r in records}}
    m = _evaluate(perfect, gold_path, tmp_path, capsys)
    from etc_fairseq.finetune.hotpotqa.metrics import METRIC_KEYS

    assert {k: m[k] for k in METRIC_KEYS} == {k: 1.0 for k in METRIC_KEYS} and m["n"] == 5
    partial = {
        "answer": {"c-alabama": "Alabama", "c-lincoln": "no", "c-aristotle": "Proxenus", "c-autism": "autism."},
        "sp": {"c-alabama": [["Alabama", 2], ["Alabama", 1]], "c-lincoln": [["Abraham Lincoln", 0]],
               "c-aristotle": [["Aristotle", 1], ["Anarchism", 0]]},
    }
    m = _evaluate(partial, gold_path, tmp_path, capsys)
    # alabama all 1; lincoln answer 0 (yes/no mismatch), sp 1, joint 0; aristotle answer p 1 r 1/3 f1 1/2,
    # sp p 1/2 r 1 f1 2/3, joint p 1/2 r 1/3 f1 2/5; anarchism missing; autism answer 1, sp missing, joint 0
    assert m["em"] == 0.4 and m["f1"] == 0.5
    assert m["sp_em"] == 0.4 and m["sp_f1"] == round((1 + 1 + 2 / 3) / 5, 4)
    assert m["joint_em"] == 0.2 and m["joint_f1"] == round((1 + 0.4) / 5, 4)
    assert m["missing_answer"] == 1 and m["missing_sp"] == 2


def test_evaluate_cli_rejects_gold_without_answers(files, tmp_path, capsys):
    from etc_fairseq.cli.evaluate import main

    p = tmp_path / "pred.json"
    p.write_text(json.dumps({"answer": {}, "sp": {}}))
    assert main(["hotpotqa", "--predictions", str(p), "--gold", str(files / "test.json")]) == 1
    err = capsys.readouterr().err
    assert "test.json: record 0 (_id c-alabama): field 'answer'" in err


def test_evaluate_cli_refuses_an_empty_gold_list(tmp_path, capsys):
    # the official script would average over nothing; we refuse, naming the file
    from etc_fairseq.cli.evaluate import main
    from etc_fairseq.finetune.hotpotqa.metrics import evaluate

    p, g = tmp_path / "pred.json", tmp_path / "gold.json"
    p.write_text(json.dumps({"answer": {}, "sp": {}}))
    g.write_text("[]")
    assert main(["hotpotqa", "--predictions", str(p), "--gold", str(g)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{g}: no gold records" in err[0]
    with pytest.raises(ValueError, match="no gold examples"):
        evaluate({"answer": {}, "sp": {}}, [])


# ------------------------------------------------------------------------------------------------------
# criterion losses (hand-computed)
# ------------------------------------------------------------------------------------------------------


def test_hotpotqa_losses_masks():
    import math

    from etc_fairseq.finetune.hotpotqa.criterion import hotpotqa_losses

    sp_logits = torch.tensor([[5.0, 0.0, 2.0], [9.0, 9.0, -1.0]])
    type_logits = torch.tensor([[1.0, 0.0, 0.0], [0.0, 7.0, 0.0]])
    start = torch.tensor([[0.0, 1.0, 0.0, 50.0], [0.0, 0.0, 0.0, 0.0]])
    end = torch.tensor([[0.0, 0.0, 2.0, 50.0], [0.0, 0.0, 0.0, 0.0]])
    pad = torch.tensor([[False, False, False, True], [False, False, False, False]])
    target = {
        "sp_label": torch.tensor([[-1, 1, 0], [-1, -1, 1]]),
        "answer_type": torch.tensor([[0], [-1]]),
        "answer_span": torch.tensor([[1, 2], [-1, -1]]),
    }
    out = hotpotqa_losses(sp_logits, type_logits, start, end, pad, target)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    want_sp = -(math.log(sig(0.0)) + math.log(1 - sig(2.0)) + math.log(sig(-1.0))) / 3
    want_type = -(1.0 - math.log(math.e + 2))
    # the padded position (logit 50) is excluded from the softmax
    want_span = 0.5 * (-(1.0 - math.log(2 + math.e)) - (2.0 - math.log(2 + math.e ** 2)))
    assert out["sp_count"] == 3 and out["type_count"] == 1 and out["span_count"] == 1
    assert float(out["sp_loss"]) == pytest.approx(want_sp, rel=1e-5)
    assert float(out["type_loss"]) == pytest.approx(want_type, rel=1e-5)
    assert float(out["span_loss"]) == pytest.approx(want_span, rel=1e-5)
    none = hotpotqa_losses(sp_logits, type_logits, start, end, pad, {
        "sp_label": torch.full((2, 3), -1), "answer_type": torch.full((2, 1), -1), "answer_span": torch.full((2, 2), -1)})
    assert float(none["sp_loss"]) == float(none["type_loss"]) == float(none["span_loss"]) == 0.0


# ------------------------------------------------------------------------------------------------------
# end to end: etc-prepare -> fairseq-train (from etc_tiny_checkpoint) -> fairseq-validate -> etc-predict
# -> etc-evaluate
# ------------------------------------------------------------------------------------------------------


def run_fairseq(module, *args):
    proc = run_python(["-m", module, *args], cwd=REPO, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{module} failed:\n{out[-4000:]}"
    return out


def _metric(log, name):
    import re

    found = re.findall(rf"\| {name} ([\d.]+)", log)
    assert found, f"{name} not in:\n{log[-2000:]}"
    return float(found[-1])


def test_end_to_end_train_validate_predict_evaluate(prepared, files, records, etc_tiny_checkpoint, tmp_path, capsys):
    import re

    from etc_fairseq.cli.evaluate import main as evaluate_main
    from etc_fairseq.cli.predict import main as predict_main

    save = tmp_path / "ckpt"
    log = run_fairseq(
        "fairseq_cli.train", str(prepared), "--user-dir", USER_DIR, "--task", "etc_hotpotqa",
        "--criterion", "etc_hotpotqa", "--arch", "etc_tiny", "--hard-g2l", "--max-global-positions", "256",
        "--finetune-from-model", str(etc_tiny_checkpoint), "--batch-size", "5", "--required-batch-size-multiple", "1",
        "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "fixed", "--max-update", "2", "--cpu", "--seed", "1",
        "--num-workers", "0", "--no-epoch-checkpoints", "--disable-validation", "--log-format", "simple",
        "--log-interval", "1", "--save-dir", str(save),
    )
    inner = re.findall(r"train_inner \| .*", log)
    assert len(inner) == 2 and "num_updates=2" in inner[-1]
    for key in ("sp_loss=", "type_loss=", "span_loss=", "type_acc=", "sp_acc="):
        assert all(key in line for line in inner), key
    # decoding to answers is evaluation only: a training step reads nothing from the device (docs/tpu.md)
    assert not any("ans_em=" in line or "joint_f1=" in line for line in inner)
    ckpt = save / "checkpoint_last.pt"

    # fairseq-validate at sp threshold 0 (every sentence predicted: sp F1 is known to be > 0)
    valid = run_fairseq("fairseq_cli.validate", str(prepared), "--user-dir", USER_DIR, "--task", "etc_hotpotqa",
                        "--criterion", "etc_hotpotqa", "--sp-threshold", "0.0", "--path", str(ckpt), "--cpu",
                        "--batch-size", "3", "--num-workers", "0", "--valid-subset", "valid")
    vm = {k: _metric(valid, k) for k in ("ans_em", "ans_f1", "sp_em", "sp_f1", "joint_em", "joint_f1", "sp_acc")}
    # 4 dev examples, 15 sentences each, 2 / 1 / 1 / 2 gold facts: sp F1 = mean of 2 p r / (p + r), p = k/15, r = 1
    sp_f1 = np.mean([2 * (k / 15) / (k / 15 + 1) for k in (2, 1, 1, 2)])
    assert vm["sp_f1"] == pytest.approx(100 * sp_f1, abs=1e-3) and vm["sp_em"] == 0.0
    # the on-device sp_acc at threshold 0: every labelled sentence predicted, 6 of the 60 are gold facts
    assert vm["sp_acc"] == pytest.approx(100 * 6 / 60, abs=1e-3)

    # etc-predict at the same threshold and etc-evaluate give the same numbers as the criterion
    pred = tmp_path / "pred.json"
    assert predict_main(["hotpotqa", "--path", str(ckpt), "--data", str(prepared), "--split", "valid",
                         "--output", str(pred), "--sp-threshold", "0.0", "--batch-size", "2"]) == 0
    capsys.readouterr()
    predictions = json.loads(pred.read_text())
    assert set(predictions) == {"answer", "sp"} and set(predictions["answer"]) == {r["_id"] for r in records[:4]}
    assert all(len(v) == 15 for v in predictions["sp"].values())
    assert evaluate_main(["hotpotqa", "--predictions", str(pred), "--gold", str(files / "dev.json")]) == 0
    em = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for ours, theirs in (("ans_em", "em"), ("ans_f1", "f1"), ("sp_em", "sp_em"), ("sp_f1", "sp_f1"),
                         ("joint_em", "joint_em"), ("joint_f1", "joint_f1")):
        assert vm[ours] == pytest.approx(100 * em[theirs], abs=0.01), ours

    # threshold tuning on dev: 11 thresholds reported, the best by joint F1 is used
    report = tmp_path / "report.json"
    assert predict_main(["hotpotqa", "--path", str(ckpt), "--data", str(prepared), "--split", "valid",
                         "--output", str(pred), "--tune-sp-threshold", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    rep = json.loads(report.read_text())
    assert [r["threshold"] for r in rep["tuning"]] == [round(0.1 * i, 1) for i in range(11)]
    assert out.count("sp threshold ") >= 11 and f"best sp threshold on valid (joint F1): {rep['sp_threshold']}" in out
    assert rep["metrics"]["joint_f1"] == max(r["joint_f1"] for r in rep["tuning"])

    # the test split (no answers): predictions for every id, facts name real (title, sentence) pairs
    assert predict_main(["hotpotqa", "--path", str(ckpt), "--data", str(prepared), "--split", "test",
                         "--output", str(pred), "--sp-threshold", "0.3"]) == 0
    predictions = json.loads(pred.read_text())
    assert set(predictions["answer"]) == set(predictions["sp"]) == {r["_id"] for r in records}
    for r in records:
        ctx = dict((t, s) for t, s in r["context"])
        assert all(t in ctx and 0 <= k < len(ctx[t]) for t, k in predictions["sp"][r["_id"]])
        assert isinstance(predictions["answer"][r["_id"]], str)


def test_question_cosine_head_adds_the_scaled_cosine_to_the_supporting_fact_logits(prepared):
    """--question-cosine: a fourth head whose scaled cosine between each global token's output and the mean of
    the QUESTION tokens' outputs, less its mean over the example's SENTENCE tokens, is added to its supporting-fact
    logit; the type and span logits are unchanged."""
    from etc_fairseq.encoder.heads import scaled_cosine
    from etc_fairseq.finetune.hotpotqa.decode import QUESTION_HEAD, SP_HEAD, SPAN_HEAD, TYPE_HEAD, apply_heads
    from etc_fairseq.finetune.hotpotqa.task import EtcHotpotqaConfig, EtcHotpotqaTask
    from etc_fairseq.models import config_for_arch
    from etc_fairseq.structure.global_tokens import GlobalTokenType as T

    def build(**cfg):
        task = EtcHotpotqaTask.setup_task(EtcHotpotqaConfig(data=str(prepared), seed=1, **cfg))
        torch.manual_seed(1)
        return task, task.build_model(config_for_arch("etc_tiny", dropout=0.0, attention_dropout=0.0)).eval()

    plain_task, plain = build()
    assert set(plain.task_heads) == {SP_HEAD, TYPE_HEAD, SPAN_HEAD}
    task, model = build(question_cosine=True)
    assert set(model.task_heads) == {SP_HEAD, TYPE_HEAD, SPAN_HEAD, QUESTION_HEAD}
    ds = task.load_dataset("valid")
    sample = ds.collater([ds[i] for i in range(len(ds))])
    types = sample["net_input"]["global_types"]  # [B, G]
    with torch.no_grad():
        features, extra = task.forward_features(model, sample)
        heads = apply_heads(model, features, extra, types)
        without = apply_heads(plain, features, extra, types)  # the same seed: the same three heads
        g = extra["global_features"]  # [B, G, D]
        qh = model.task_heads[QUESTION_HEAD]
        for b in range(types.size(0)):
            question = g[b][types[b].eq(int(T.QUESTION))].mean(dim=0)  # [D]
            assert types[b].eq(int(T.QUESTION)).sum() > 0
            cosine = scaled_cosine(qh.item_proj(g[b])[None], qh.query_proj(question)[None], qh.log_scale.exp())[0]
            sentences = types[b].eq(int(T.SENTENCE))
            assert sentences.sum() > 1
            expected = without.sp_logits[b] + cosine - cosine[sentences].mean()
            assert torch.allclose(heads.sp_logits[b], expected, atol=1e-5)
            # centred: the sentences' added terms average to zero
            assert abs(float((heads.sp_logits[b] - without.sp_logits[b])[sentences].mean())) < 1e-5
        for name in ("type_logits", "start_logits", "end_logits"):
            assert torch.equal(getattr(heads, name), getattr(without, name)), name
        assert not torch.allclose(heads.sp_logits, without.sp_logits)


def test_word_overlap_baseline_on_a_hand_checked_record(tmp_path, capsys):
    """overlap.py: the sentence sharing most content words with the question names the answer (its title) and
    the facts (it and its better neighbour); etc-evaluate scores the file like a model's predictions."""
    from etc_fairseq.cli.evaluate import main as evaluate_main
    from examples.hotpotqa.overlap import main, overlap_prediction

    rec = {"_id": "a", "question": "The harbour was rebuilt after the storm.", "type": "bridge", "answer": "Portsmouth",
           "context": [["Leeds", ["Leeds has a harbour.", " Its storm drains were rebuilt."]],
                       ["Portsmouth", ["Portsmouth is a port.", " A storm hit it.",
                                       " The harbour was rebuilt in stone after the storm.", " Ships came back."]]],
           "supporting_facts": [["Portsmouth", 1], ["Portsmouth", 2]]}
    # shared content words: Leeds 1 (harbour), 2 (storm, rebuilt); Portsmouth 0, 1 (storm), 3 (harbour, rebuilt,
    # storm), 0: the best is Portsmouth 2, its better neighbour sentence 1
    assert overlap_prediction(rec) == ("Portsmouth", [["Portsmouth", 1], ["Portsmouth", 2]])
    tie = dict(rec, context=[["Leeds", ["Leeds has a harbour."]], ["Hull", ["Hull has a harbour.", " Nothing."]]])
    assert overlap_prediction(tie) == ("Leeds", [["Leeds", 0]])  # the earlier sentence; no neighbour
    miss = dict(rec, _id="b", supporting_facts=[["Portsmouth", 2], ["Portsmouth", 3]], answer="Leeds")
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps([rec, miss]), encoding="utf-8")
    pred = tmp_path / "pred.json"
    assert main(["--records", str(gold), "--out", str(pred)]) == 0
    assert evaluate_main(["hotpotqa", "--predictions", str(pred), "--gold", str(gold)]) == 0
    scores = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # record a: answer and both facts right; record b: wrong answer, one of two facts (p = r = 1/2)
    assert scores["em"] == pytest.approx(0.5) and scores["sp_em"] == pytest.approx(0.5)
    assert scores["sp_f1"] == pytest.approx((1.0 + 0.5) / 2)


def test_side_records_random_access_pickling_and_bad_line(prepared, tmp_path):
    import pickle
    import shutil

    from etc_fairseq.data.structured import SideRecords

    side = SideRecords(prepared / "valid.side.jsonl")
    lines = (prepared / "valid.side.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(side) == len(lines) == 4
    assert [side[i] for i in (3, 0, 2)] == [json.loads(lines[i]) for i in (3, 0, 2)]
    clone = pickle.loads(pickle.dumps(side))  # data-loader workers reopen the file
    assert clone[1] == json.loads(lines[1])
    bad = tmp_path / "valid.side.jsonl"
    shutil.copyfile(prepared / "valid.side.jsonl", bad)
    bad.write_text("\n".join(lines[:2] + ['{"id": "broken"'] + lines[3:]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"valid.side.jsonl:3: not valid JSON"):
        SideRecords(bad)[2]


def test_generated_records_are_next_sentence_records_in_the_official_format(wiki_dump, pretrain_data, tmp_path):
    """construct.py --generate: every record reads as official HotpotQA; the answer is the question's article
    title, the supporting facts the sentences around the gap, which are consecutive in the real article with
    the question between them; held-out records use other articles; etc-prepare hotpotqa finds every answer
    span and every supporting fact."""
    from etc_fairseq.cli.prepare import main as prepare_main
    from etc_fairseq.finetune.hotpotqa.schema import read_hotpotqa
    from etc_fairseq.finetune.nextsent.convert import read_articles

    construct = _construct_module()
    assert construct.main(["--dump", str(wiki_dump), "--out", str(tmp_path), "--generate", "--train", "12",
                           "--valid", "5", "--distractors", "3"]) == 0
    train, dev = read_hotpotqa(tmp_path / "train.json"), read_hotpotqa(tmp_path / "dev.json")
    assert (len(train), len(dev)) == (12, 5)
    test = json.loads((tmp_path / "test.json").read_text())
    assert [set(r) for r in test] == [{"_id", "question", "context"}] * 5
    paragraphs = {t: p for a in read_articles(wiki_dump) for t, p in [(a.title, a.paragraphs)]}
    for rec in train + dev:
        titles = [t for t, _ in rec.context]
        assert len(titles) == 4 == len(set(titles)) and rec.answer in titles and rec.type == "bridge"
        assert {t for t, _ in rec.supporting_facts} == {rec.answer}
        gapped = dict(rec.context)[rec.answer]
        facts = [gapped[k].strip() for _, k in rec.supporting_facts]
        # in the real article: [fact before] + question + fact after, consecutive in one paragraph
        want = ([facts[0]] if len(facts) == 2 else []) + [rec.question, facts[-1]]
        assert any(list(p[i:i + len(want)]) == want for p in paragraphs[rec.answer] for i in range(len(p)))
    assert not {r.answer for r in train} & {t for r in dev for t, _ in r.context}  # held-out articles only
    out = tmp_path / "data"
    assert prepare_main(["hotpotqa", "--train", str(tmp_path / "train.json"), "--valid", str(tmp_path / "dev.json"),
                         "--out", str(out), "--pretrain-dir", str(pretrain_data), "--max-long-len", "2048",
                         "--max-global-len", "256"]) == 0
    counts = json.loads((out / "valid.meta.json").read_text())
    assert counts["answers_not_found"] == 0 and counts["sp_facts_not_in_context"] == 0, counts
