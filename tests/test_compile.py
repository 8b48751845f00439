"""XLA/TPU readiness (issue 7, goal 6): with fixed-length padding, the model's forward and the cpc_mlm
criterion contain no host synchronisation and no data-dependent Python control flow, so
``torch.compile(..., fullgraph=True)`` traces forward + loss in one graph (it raises on any graph
break).  Batches come from the real Wikipedia pre-training fixture (etc_pretraining task,
``pad_to_fixed_length``), the model is etc_tiny."""
import time

import pytest
import torch

from etc_fairseq.criterions.cpc_mlm import CpcMlmCriterion
from etc_fairseq.models import EtcModel, config_for_arch
from etc_fairseq.tasks.pretraining import EtcPretrainingConfig, EtcPretrainingTask

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
