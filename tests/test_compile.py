"""XLA/TPU readiness (issues 7 and 20): with fixed-length padding, the model's forward, cpc_mlm and every
fine-tuning criterion contain no host synchronisation and no data-dependent Python control flow, so
``torch.compile(..., fullgraph=True)`` traces forward + loss in one graph (it raises on any graph
break), and batches of different content give that same graph (no recompilation) -- what
``fairseq-train --tpu`` needs (docs/tpu.md; benchmarks/xla_check.py runs it on PyTorch/XLA).  Batches come
from the real Wikipedia pre-training fixture and each task's CONSTRUCTED files, the model is etc_tiny."""
import json
import time
from pathlib import Path

import pytest
import torch

from etc_fairseq.pretraining.criterion import CpcMlmCriterion
from etc_fairseq.models import EtcModel, config_for_arch
from etc_fairseq.pretraining.task import EtcPretrainingConfig, EtcPretrainingTask

LONG, GLOBAL = 64, 8


@pytest.fixture(scope="module")
def fixed_task(pretrain_data):
    cfg = EtcPretrainingConfig(data=str(pretrain_data), max_long_len=LONG, max_global_len=GLOBAL, seed=1,
                               pad_to_fixed_length=True)
    task = EtcPretrainingTask.setup_task(cfg)
    task.load_dataset("valid")
    return task


def _batch_with_cpc(task):
    """Two fixed-length items, at least one with CPC-masked sentences (real fixture text)."""
    ds = task.dataset("valid")
    with_cpc = [i for i in range(len(ds)) if ds[i]["cpc_global_index"].numel() > 0]
    assert with_cpc, "the fixture should contain CPC-masked sentences"
    other = 0 if with_cpc[0] != 0 else 1
    batch = ds.collater([ds[with_cpc[0]], ds[other]])
    assert batch["net_input"]["src_tokens"].shape == (2, LONG)  # fixed shapes
    assert batch["net_input"]["global_tokens"].shape == (2, GLOBAL)
    return batch


def test_forward_and_loss_compile_fullgraph(fixed_task):
    torch.manual_seed(0)
    # dropout 0: the compiled and the eager run must agree exactly enough to compare
    model = EtcModel.build_model(config_for_arch("etc_tiny", dropout=0.0, attention_dropout=0.0), fixed_task)
    model.train()
    # the full pre-training loss: MLM + CPC (the CPC second encoder runs inside the same graph)
    crit = CpcMlmCriterion(fixed_task, mlm_weight=0.8, cpc_weight=0.2)

    def loss_fn(sample):
        loss, _, log = crit(model, sample)
        return loss, log["mlm_count"], log["mlm_correct"], log["cpc_count"]

    batch = _batch_with_cpc(fixed_task)
    loss_e, n_e, c_e, p_e = loss_fn(batch)
    assert p_e > 0  # the CPC term is part of the traced loss
    torch._dynamo.reset()
    # fullgraph=True raises on any graph break; "aot_eager" also traces the backward graph (as an
    # XLA-style backend would) without spending time on code generation
    compiled = torch.compile(loss_fn, fullgraph=True, dynamic=False, backend="aot_eager")
    t0 = time.perf_counter()
    loss_c, n_c, c_c, p_c = compiled(batch)
    seconds = time.perf_counter() - t0
    assert torch.allclose(loss_e, loss_c, rtol=1e-5, atol=1e-6)
    assert int(n_e) == int(n_c) > 0 and int(c_e) == int(c_c) and p_e == p_c
    # gradients flow through the compiled graph and match eager
    model.zero_grad()
    loss_e.backward()
    grad_e = model.encoder.sentence_encoder.layers[0].self_attn.rel_emb["long"].grad.clone()
    model.zero_grad()
    compiled(batch)[0].backward()
    grad_c = model.encoder.sentence_encoder.layers[0].self_attn.rel_emb["long"].grad
    assert grad_c.abs().sum() > 0 and torch.allclose(grad_e, grad_c, rtol=1e-4, atol=1e-6)
    print(f"trace + first compiled call: {seconds:.1f} s")


# ---------------------------------------------------------------------------------------------------------
# one graph for every batch: fixed-length padding fixes every shape the model and the criterions see, and
# nothing reads a tensor value on the host. Tasks and criterions are taken by their registered names.
# ---------------------------------------------------------------------------------------------------------


def _graph_counting_backend():
    """A torch.compile backend that records every graph it is handed and runs it eagerly."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return graphs, backend


def _registered(task_name: str, criterion_name: str, **task_fields):
    import etc_fairseq.register  # noqa: F401  (registers the etc_* tasks and criterions)
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY

    task_cfg = TASK_DATACLASS_REGISTRY[task_name](**task_fields)
    task = TASK_REGISTRY[task_name].setup_task(task_cfg)
    return task, lambda: CRITERION_REGISTRY[criterion_name].build_criterion(CRITERION_DATACLASS_REGISTRY[criterion_name](), task)


def _compile_over_batches(model, criterion, batches, log_keys):
    """Eager and compiled (fullgraph, static shapes) loss + logged counts on every batch; returns the number
    of graphs compiled and the (eager, compiled) results."""
    model.train()

    def loss_fn(sample):
        loss, sample_size, log = criterion(model, sample)
        return (loss, sample_size) + tuple(log[k] for k in log_keys)

    eager = [loss_fn(b) for b in batches]
    torch._dynamo.reset()
    graphs, backend = _graph_counting_backend()
    compiled = torch.compile(loss_fn, fullgraph=True, dynamic=False, backend=backend)
    outputs = [compiled(b) for b in batches]
    return len(graphs), eager, outputs, graphs


def _assert_same(eager, compiled):
    for e, c in zip(eager, compiled):
        assert torch.allclose(e[0], c[0], rtol=1e-5, atol=1e-6), (e[0], c[0])
        for a, b in zip(e[1:], c[1:]):
            assert float(a) == float(b), (e, c)


def test_pretraining_one_graph_for_batches_of_varying_content(fixed_task):
    """cpc_mlm over batches with 0, some and more CPC sentences and different MLM counts: one graph."""
    torch.manual_seed(0)
    ds = fixed_task.dataset("valid")
    n_cpc = [ds[i]["cpc_global_index"].numel() for i in range(len(ds))]
    none = [i for i, n in enumerate(n_cpc) if n == 0]
    some = sorted((i for i, n in enumerate(n_cpc) if n > 0), key=lambda i: n_cpc[i])
    assert len(none) >= 2 and len(some) >= 3, "the fixture should have items with and without CPC sentences"
    picks = [(none[0], none[1]), (some[0], none[0]), (some[-1], some[-2]), (some[1], some[0])]
    batches = [ds.collater([ds[i], ds[j]]) for i, j in picks]
    counts = {int(b["cpc"]["valid"].sum()) for b in batches}
    assert len(counts) >= 3, counts  # really different CPC counts, same shapes
    shapes = {tuple((k, tuple(v.shape)) for k, v in sorted(b["cpc"].items())) for b in batches}
    assert len(shapes) == 1, shapes
    assert len({int(b["target"].ne(ds.pad).sum()) for b in batches}) > 1  # different MLM counts

    model = EtcModel.build_model(config_for_arch("etc_tiny", dropout=0.0, attention_dropout=0.0), fixed_task)
    crit = CpcMlmCriterion(fixed_task, mlm_weight=0.8, cpc_weight=0.2)
    n_graphs, eager, compiled, _ = _compile_over_batches(
        model, crit, batches, ("mlm_count", "mlm_correct", "cpc_count", "cpc_correct")
    )
    assert n_graphs == 1  # no recompilation for any later batch
    _assert_same(eager, compiled)
    # the padded CPC rows change nothing: the same batch without fixed-length padding gives the same loss
    ds_free = fixed_task.dataset("valid")
    ds_free.pad_to_fixed_length = False
    try:
        free = ds_free.collater([ds_free[some[-1]], ds_free[some[-2]]])
    finally:
        ds_free.pad_to_fixed_length = True
    loss_free, _, log_free = crit(model, free)
    assert int(log_free["cpc_count"]) == int(eager[2][4]) > 1
    assert torch.allclose(loss_free, eager[2][0], rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def wikihop_fixed(tmp_path_factory, wiki_dump, pretrain_data):
    from etc_fairseq.cli.prepare import main as prepare_main
    from examples.wikihop import construct
    tmp = tmp_path_factory.mktemp("wikihop_compile")
    # records with 2 and with 4 candidates (construct.py gives every record of a run the same number)
    records = []
    for supports in (2, 4):
        raw = tmp / f"raw{supports}"
        assert construct.main(["--dump", str(wiki_dump), "--out", str(raw), "--train", "4", "--valid", "1",
                               "--supports", str(supports), "--seed", "3", "--max-articles", "30",
                               "--train-articles", "20"]) == 0
        for r in json.loads((raw / "train.json").read_text()):
            records.append(dict(r, id=f"s{supports}-{r['id']}"))
    (tmp / "train.json").write_text(json.dumps(records))
    assert prepare_main(["wikihop", "--train", str(tmp / "train.json"), "--valid", str(tmp / "raw2" / "dev.json"),
                         "--out", str(tmp / "data"), "--pretrain-dir", str(pretrain_data),
                         "--max-long-len", "128", "--max-global-len", "32"]) == 0
    return _registered("etc_wikihop", "etc_wikihop", data=str(tmp / "data"), max_long_len=128, max_global_len=32,
                       pad_to_fixed_length=True)


def test_wikihop_one_graph_for_batches_of_varying_content(wikihop_fixed):
    """etc_wikihop over batches with different numbers of candidates and answers: one graph, eager values."""
    task, make_criterion = wikihop_fixed
    task.load_dataset("train")
    ds = task.dataset("train")
    from etc_fairseq.structure.global_tokens import GlobalTokenType

    n_cand = [int((ds[i]["global_types"] == int(GlobalTokenType.CANDIDATE)).sum()) for i in range(len(ds))]
    order = sorted(range(len(ds)), key=lambda i: n_cand[i])
    picks = [(order[0], order[1]), (order[-1], order[-2]), (order[0], order[-1]), (order[2], order[3])]
    batches = [ds.collater([ds[i], ds[j]]) for i, j in picks]
    assert len({max(n_cand[i], n_cand[j]) for i, j in picks}) >= 2, n_cand  # candidate counts differ
    shapes = {tuple((k, tuple(v.shape)) for k, v in sorted(b["target"].items())) for b in batches}
    assert len(shapes) == 1, shapes

    torch.manual_seed(0)
    model = task.build_model(config_for_arch("etc_tiny", dropout=0.0, attention_dropout=0.0, max_global_positions=32))
    n_graphs, eager, compiled, _ = _compile_over_batches(model, make_criterion(), batches, ("ncorrect", "nlabelled"))
    assert n_graphs == 1
    # the static graph returns the mean over labelled examples with sample_size 1, eager the sum and the count:
    # the same loss per labelled example
    for e, c in zip(eager, compiled):
        assert int(c[1]) == 1 and int(e[1]) == int(e[3]) == int(c[3]) > 0
        assert torch.allclose(e[0] / e[1], c[0], rtol=1e-5, atol=1e-6)
        assert int(e[2]) == int(c[2])


# ---------------------------------------------------------------------------------------------------------
# every other fine-tuning criterion: HotpotQA, NQ, OpenKP, NextSent and the generic structured dataset at
# each label level. A training step (model.train()) compiles to one graph over batches of different
# content: decoding to answers (HotpotQA, NQ, OpenKP) runs only in evaluation, and no count is read on the
# host. Data: each task's CONSTRUCTED files on real Wikipedia text, built as tests/test_distributed_finetune.py
# and tests/test_structured.py build them, prepared with fixed lengths.
# ---------------------------------------------------------------------------------------------------------

from test_distributed_finetune import _example, _prepare  # noqa: E402
from test_nq import nq_examples, write_split  # noqa: E402,F401  (nq_examples is a fixture)
from test_openkp import constructed_page, wiki_docs  # noqa: E402,F401  (wiki_docs is a fixture)


def _hotpotqa_data(tmp, wiki_dump, pretrain_data, nq_examples, wiki_docs):
    records = _example("hotpotqa").constructed_records(wiki_dump)  # 3 span, 1 yes, 1 no answer
    (tmp / "train.json").write_text(json.dumps(records), encoding="utf-8")
    _prepare("hotpotqa", "--train", tmp / "train.json", "--out", tmp / "data", "--pretrain-dir", pretrain_data,
             "--max-long-len", "384", "--max-global-len", "64")
    return 384, 64


def _nq_data(tmp, wiki_dump, pretrain_data, nq_examples, wiki_docs):
    train = write_split(tmp, nq_examples, "nq-train.jsonl", "train", "simplified", gz=False)
    _prepare("nq", "--train", train, "--pretrain-dir", pretrain_data, "--max-long-len", "96",
             "--max-global-len", "48", "--doc-stride", "48", "--out", tmp / "data")
    return 96, 48


def _openkp_data(tmp, wiki_dump, pretrain_data, nq_examples, wiki_docs):
    with open(tmp / "train.jsonl", "w", encoding="utf-8") as f:
        for i, doc in enumerate(wiki_docs[:8]):
            f.write(json.dumps(constructed_page(doc, i, absent_phrase=(i % 4 == 3))) + "\n")
    _prepare("openkp", "--train", tmp / "train.jsonl", "--out", tmp / "data", "--pretrain-dir", pretrain_data,
             "--max-long-len", "192", "--max-global-len", "32")
    return 192, 32


def _nextsent_data(tmp, wiki_dump, pretrain_data, nq_examples, wiki_docs):
    # a small long budget: truncation drops some answers (an example without answer is part of the variety);
    # 96 global tokens: with 48, the records drawn since questions are sampled without replacement lose
    # almost every sentence (and answer) to the global budget, and the batches no longer differ
    _prepare("nextsent", "--dump", wiki_dump, "--train", "8", "--valid", "2", "--seed", "2", "--out", tmp / "data",
             "--pretrain-dir", pretrain_data, "--max-long-len", "256", "--max-global-len", "96",
             "--distractors", "2", "--distractor-paragraphs", "1", "--same-article", "1")
    return 256, 96


def _structured_data(level):
    """CONSTRUCTED structured documents (tests/test_structured.py) at one label level, varied so that batches
    differ in what the criterion counts: records of both classes and one unlabelled, global labels, and span
    answers at different words, one of them unlabelled."""

    def build(tmp, wiki_dump, pretrain_data, nq_examples, wiki_docs):
        from etc_fairseq.finetune.structured.builder import write_jsonl
        from test_structured import constructed_documents

        docs = constructed_documents(wiki_dump)
        for i, doc in enumerate(docs):
            doc.answer = None if i == 3 else (i % 3, i % 3 + (i % 2))
            if i == 5:
                doc.label = None
        write_jsonl(docs, tmp / "train.jsonl")
        _prepare("structured", "--train", tmp / "train.jsonl", "--label-level", level, "--out", tmp / "data",
                 "--pretrain-dir", pretrain_data, "--max-long-len", "256", "--max-global-len", "16")
        return 256, 16

    return build


def _content(task_name, ds, item):
    """What differs between examples of a task (batches are picked to differ in it)."""
    t = {k: v[0] for k, v in ds.collater([item])["target"].items()}
    if task_name == "hotpotqa":  # answer type (span / yes / no) and whether the span was found
        return (int(t["answer_type"][0]), int(t["answer_span"][0] >= 0), int((t["sp_label"] >= 0).sum()))
    if task_name == "nq":  # answer type of the window, and where its answers are
        return tuple(int(x) for x in t["nq_targets"][[4, 0, 2]])
    if task_name == "openkp":  # gold phrases in / absent from the document (-2), and its candidate n-grams
        g = t["gold_phrases"]
        return (int((g >= 0).sum()), int((g == -2).sum()), int((t["ngram_ids"] >= 0).sum()))
    if task_name == "nextsent":  # sentences kept, and whether the answer was kept
        return (int(t["num_sentences"][0]), int(t["answer_index"][0] >= 0))
    if task_name == "structured-record":  # the class
        return (int(t["record_label"][0]),)
    if task_name == "structured-global":  # labelled global tokens of each class
        return tuple(int((t["global_labels"] == c).sum()) for c in (-1, 0, 1))
    if task_name == "structured-span":  # where the answer is (-1: unlabelled)
        return tuple(int(x) for x in t["span"])
    raise ValueError(task_name)


#: task (etc_<name before "-">) -> (data builder, logged keys compared between eager and compiled)
FINETUNE_COMPILE = {
    "hotpotqa": (_hotpotqa_data, ("sp_loss_sum", "sp_count", "type_loss_sum", "type_count", "span_loss_sum",
                                  "span_count", "type_correct", "sp_correct")),
    "nq": (_nq_data, ("long_loss", "short_loss", "type_loss", "type_correct")),
    "openkp": (_openkp_data, ()),
    "nextsent": (_nextsent_data, ("acc_sum", "rr_sum", "lost_sum")),
    "structured-record": (_structured_data("record"), ("ncorrect", "nlabelled")),
    "structured-global": (_structured_data("global"), ("ncorrect", "nlabelled")),
    "structured-span": (_structured_data("span"), ("em_sum", "f1_sum", "nanswers")),
}


@pytest.mark.parametrize("task_name", sorted(FINETUNE_COMPILE))
def test_finetune_criterion_one_graph_for_batches_of_varying_content(task_name, tmp_path, wiki_dump, pretrain_data,
                                                                       nq_examples, wiki_docs):  # noqa: F811
    build, log_keys = FINETUNE_COMPILE[task_name]
    long_len, global_len = build(tmp_path, wiki_dump, pretrain_data, nq_examples, wiki_docs)
    registered = "etc_" + task_name.split("-")[0]
    task, make_criterion = _registered(registered, registered, data=str(tmp_path / "data"),
                                       max_long_len=long_len, max_global_len=global_len, pad_to_fixed_length=True)
    ds = task.load_dataset("train")
    items = [ds[i] for i in range(len(ds))]
    keys = [_content(task_name, ds, it) for it in items]
    order = sorted(range(len(items)), key=lambda i: keys[i])
    picks = [(order[0], order[1]), (order[-1], order[-2]), (order[0], order[-1]), (order[len(order) // 2], order[1])]
    batches = [ds.collater([items[i], items[j]]) for i, j in picks]
    assert len({keys[i] for pair in picks for i in pair}) >= 3, keys  # really different content
    shapes = {str(torch.utils._pytree.tree_map(lambda v: tuple(v.shape) if torch.is_tensor(v) else None,
                                                {k: b[k] for k in ("net_input", "target")})) for b in batches}
    assert len(shapes) == 1, shapes  # ... and one set of shapes

    torch.manual_seed(0)
    model = task.build_model(config_for_arch("etc_tiny", dropout=0.0, attention_dropout=0.0,
                                             max_global_positions=global_len))
    n_graphs, eager, compiled, _ = _compile_over_batches(model, make_criterion(), batches, ("loss",) + log_keys)
    assert n_graphs == 1  # no graph break (fullgraph) and no recompilation for any later batch
    for e, c in zip(eager, compiled):
        # eager sums over labelled items with sample_size = their number; a static graph may return the mean
        # with sample_size 1 (criterion_metrics.loss_per_sample_size): the same loss per sample
        assert torch.allclose(e[0] / max(float(e[1]), 1.0), c[0] / float(c[1]), rtol=1e-5, atol=1e-6), (e[:2], c[:2])
        for name, a, b in zip(log_keys, e[3:], c[3:]):
            assert torch.is_tensor(b), name  # a static graph logs device values, read when fairseq logs
            assert float(a) == pytest.approx(float(b), rel=1e-5, abs=1e-6), name
    # evaluation (validation, fairseq-validate) still decodes: the official metrics are there in eager mode
    model.eval()
    with torch.no_grad():
        _, _, log = make_criterion()(model, batches[0])
    official = {"hotpotqa": "ans_em_sum", "nq": "nq_windows", "openkp": "kp_f1_5", "nextsent": "acc_sum",
                "structured-record": "ncorrect", "structured-global": "ncorrect", "structured-span": "em_sum"}[task_name]
    assert official in log
