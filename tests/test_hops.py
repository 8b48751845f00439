"""examples/ablations/hops.py: the SYNTHETIC hop tasks build the examples they describe, and the g2g
relative offsets between SENTENCE tokens are what lets ETC step from one sentence to the next.

A g2g label bug that loses the offsets (every pair of sentence tokens labelled alike, or the offsets
never reaching the attention) would pass the exactness tests of the attention, which take the labels as
given; here it makes ``step`` unlearnable, as the control without offsets (every sentence token in its
own global context) shows: it stays at chance.
"""
import pytest
import torch

from etc_fairseq.structure.global_tokens import GlobalTokenType as T
from examples.ablations import hops

SMALL = hops.Shape(sentences=8, pieces=4, vocab=50)


@pytest.mark.parametrize("task", hops.TASKS)
def test_examples_are_what_the_task_says(task):
    n, S, P = 64, SMALL.sentences, SMALL.pieces
    inputs, target = hops.make_batch(task, n, SMALL, torch.Generator().manual_seed(3))
    long = inputs["long_tokens"].view(n, S, P)
    steps = 1 if task in ("step", "matchstep") else 0
    assert target.min() >= steps and target.max() <= S - 2 + steps
    found = target - steps
    if task in ("match", "matchstep"):
        q = inputs["global_tokens"][:, 0]
        assert bool(q.ge(hops.FIRST_PIECE).all())
        assert long.eq(q[:, None, None]).sum(dim=(1, 2)).tolist() == [1] * n   # q occurs once ...
        assert bool(long[torch.arange(n), found].eq(q[:, None]).any(-1).all())   # ... in the found sentence
    else:
        assert long.eq(hops.MARK).sum(dim=(1, 2)).tolist() == [1] * n
        assert bool(long[torch.arange(n), found].eq(hops.MARK).any(-1).all())
        assert bool(inputs["global_tokens"][:, 0].eq(hops.FILLER).all())
    assert inputs["global_types"][0].tolist() == [int(T.QUESTION)] + [int(T.SENTENCE)] * S
    st = inputs["structure"]
    assert st["long_segment"][0].tolist() == [1 + i // P for i in range(S * P)]   # piece -> its sentence token
    assert st["long_context"][0].tolist() == [i // P for i in range(S * P)]
    assert st["global_context"][0].tolist() == [0] + [1] * S


def test_control_puts_every_sentence_token_in_its_own_context():
    inputs, _ = hops.make_batch("step", 2, SMALL, torch.Generator().manual_seed(3), g2g_positions=False)
    assert inputs["structure"]["global_context"][1].tolist() == list(range(SMALL.sentences + 1))


def test_unknown_task_is_refused():
    with pytest.raises(ValueError, match="unknown task 'hop'"):
        hops.make_batch("hop", 2, SMALL, torch.Generator())


def test_stepping_to_the_next_sentence_is_learnt_through_the_g2g_offsets():
    torch.set_num_threads(1)
    with_offsets = hops.train("step", 2, 40, 1, SMALL, batch=32, lr=3e-3, eval_every=40, eval_examples=256)
    without = hops.train("step", 2, 40, 1, SMALL, batch=32, lr=3e-3, eval_every=40, eval_examples=256,
                         g2g_positions=False)
    chance = 100.0 / (SMALL.sentences - 1)   # the answer is never the first sentence
    print(f"step after 40 updates: with g2g offsets {with_offsets[-1][1]} %, without {without[-1][1]} % "
          f"(chance {chance:.1f} %)")
    assert with_offsets[-1][1] >= 95.0
    assert without[-1][1] <= 2 * chance


def test_summary_is_the_final_accuracy_of_every_seed():
    runs = [{"task": "step", "layers": 2, "seed": s, "curve": [(50, 10.0), (100, final)]}
            for s, final in [(1, 90.0), (2, 100.0), (3, 95.0)]]
    runs.append({"task": "mark", "layers": 2, "seed": 1, "curve": [(100, 40.0)]})
    rows = {(r["task"], r["layers"]): r for r in hops.summarize(runs)}
    assert rows["step", 2] == {"task": "step", "layers": 2, "updates": 100, "per_seed": [90.0, 100.0, 95.0],
                               "mean": 95.0, "std": 5.0}
    assert rows["mark", 2]["std"] == 0.0 and rows["mark", 2]["mean"] == 40.0
