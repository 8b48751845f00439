"""Numerics: fully masked attention rows, padding-only examples and bf16 on CPU give no NaN/inf in the loss
or the gradients over a short training run (etc_tiny + etc_pretraining + cpc_mlm, in process).

Real data: the Wikipedia pre-training fixture ``pretrain_data``. The padding-only rows and the fully
masked rows are CONSTRUCTED on top of real batches."""
import math

import pytest
import torch

from etc_fairseq.pretraining.criterion import CpcMlmCriterion
from etc_fairseq.models import EtcModel, config_for_arch
from etc_fairseq.pretraining.task import EtcPretrainingConfig, EtcPretrainingTask

STEPS = 2


@pytest.fixture(scope="module")
def task(pretrain_data):
    t = EtcPretrainingTask.setup_task(EtcPretrainingConfig(data=str(pretrain_data), max_long_len=128,
                                                           max_global_len=16, seed=3))
    t.load_dataset("train")
    return t


def real_batch(task, start, n=2):
    ds = task.datasets["train"]
    return ds.collater([ds[i] for i in range(start, start + n)])


def with_padding_rows(sample, pad, rows=2):
    """The batch plus ``rows`` rows that are padding only (no long and no global tokens). CONSTRUCTED."""
    ni = sample["net_input"]
    B, L = ni["src_tokens"].shape

    def grow(t, fill):
        return torch.cat([t, torch.full((rows,) + tuple(t.shape[1:]), fill, dtype=t.dtype)])

    out = dict(sample)
    out["net_input"] = dict(ni, src_tokens=grow(ni["src_tokens"], pad), src_lengths=grow(ni["src_lengths"], 0),
                            global_tokens=grow(ni["global_tokens"], pad), global_types=grow(ni["global_types"], 0),
                            structure={"long_segment": grow(ni["structure"]["long_segment"], -1),
                                       "long_example": grow(ni["structure"]["long_example"], 0),
                                       "global_example": grow(ni["structure"]["global_example"], 0)})
    out["target"] = grow(sample["target"], pad)
    out["nsentences"] = B + rows
    return out


def with_fully_masked_rows(sample, pad=1):
    """The batch with the last real global token of every row moved to a packed-example id (7) that no long
    token has: its g2l row (keys = long tokens) is all False, and the long tokens of its sentence lose that
    l2g key. CONSTRUCTED from a real batch."""
    out = dict(sample)
    ni = dict(sample["net_input"])
    st = {k: v.clone() for k, v in ni["structure"].items()}
    gtok = ni["global_tokens"]
    for b in range(gtok.size(0)):
        real = gtok[b].ne(pad).nonzero().flatten()
        if len(real):
            st["global_example"][b, real[-1]] = 7
    ni["structure"] = st
    out["net_input"] = ni
    return out


def train_steps(task, model, criterion, make_sample, dtype=None, steps=STEPS):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        sample = make_sample(step)
        opt.zero_grad()
        if dtype is None:
            loss, _, log = criterion(model, sample)
        else:
            with torch.autocast("cpu", dtype=dtype):
                loss, _, log = criterion(model, sample)
        loss.backward()
        assert torch.isfinite(loss).all(), (step, loss)
        for name, p in model.named_parameters():
            if p.grad is not None:
                assert torch.isfinite(p.grad).all(), (step, name)
        opt.step()
        for name, p in model.named_parameters():
            assert torch.isfinite(p).all(), (step, name)
        losses.append(float(loss))
    return losses


def new_model(task, seed=1):
    torch.manual_seed(seed)
    model = EtcModel.build_model(config_for_arch("etc_tiny"), task)
    model.train()
    return model


def test_padding_only_rows_and_fully_masked_rows_train_without_nan(task):
    model = new_model(task)
    crit = CpcMlmCriterion(task)
    pad = task.dictionary.pad()
    # the constructions do what they claim: padding rows leave the real rows' features unchanged (eval),
    # and some global tokens have no long key at all (fully masked g2l rows)
    model.eval()
    sample = real_batch(task, 0)
    padded = with_padding_rows(sample, pad)
    with torch.no_grad():
        a, _ = model(**sample["net_input"], features_only=True)
        b, eb = model(**padded["net_input"], features_only=True)
        masked = with_fully_masked_rows(sample)["net_input"]
        s = model.encoder.prepare_inputs(masked["src_tokens"], masked["global_tokens"], masked["global_types"],
                                         masked["structure"])[2]
    assert torch.isfinite(b).all() and torch.isfinite(eb["global_features"]).all()
    B, L = sample["net_input"]["src_tokens"].shape
    torch.testing.assert_close(b[:B, :L], a, rtol=1e-5, atol=1e-5)
    assert (~s.g2l_mask.any(-1) & masked["global_tokens"].ne(pad)).any()
    model.train()
    losses = train_steps(task, model, crit,
                         lambda st: with_fully_masked_rows(with_padding_rows(real_batch(task, 3 * st), pad)))
    assert all(math.isfinite(x) for x in losses)


@pytest.mark.parametrize("mode", ["autocast", "bf16_weights"])
def test_bf16_on_cpu_short_run_is_finite(task, mode):
    model = new_model(task, seed=3)
    crit = CpcMlmCriterion(task)
    pad = task.dictionary.pad()

    def make(step):
        return with_fully_masked_rows(with_padding_rows(real_batch(task, 3 * step), pad, rows=1))

    if mode == "autocast":
        losses = train_steps(task, model, crit, make, dtype=torch.bfloat16)
    else:
        model = model.to(torch.bfloat16)
        losses = train_steps(task, model, crit, make)
        assert next(model.parameters()).dtype == torch.bfloat16
    assert all(math.isfinite(x) for x in losses)
    assert 3 < losses[0] < 15  # ~log(vocab) at the start: a real loss, not zero from an empty batch
