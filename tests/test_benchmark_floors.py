"""benchmarks/layer_vs_peers.py's two floors (``etc_no_attn``, ``etc_matmul_floor``) must time the ETC layer
*without* its attention kernel. They plug in through the attention registry; an earlier hook stopped being
called when the layer moved to that registry, and the floors silently timed the full kernel."""
import pytest
import torch

from benchmarks import layer_vs_peers as lvp
from etc_fairseq.attention import global_local


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the implementations whose blocked kernel raises when called."""
    impls = dict(global_local.IMPLEMENTATIONS)

    def boom(*args, **kwargs):
        raise AssertionError("the blocked kernel ran")

    impls["blocked"] = (boom, boom)
    monkeypatch.setattr(global_local, "IMPLEMENTATIONS", impls)
    return impls


@pytest.mark.parametrize("build, impl", [(lvp.build_etc_no_attn, lvp.NO_ATTENTION_IMPL),
                                         (lvp.build_etc_matmul_floor, lvp.MATMUL_FLOOR_IMPL)])
def test_floors_do_not_run_the_kernel(registry, build, impl):
    torch.manual_seed(0)
    layer, step, inputs = build(512)
    assert layer.self_attn.backend == impl and impl in registry
    step()  # forward + backward without the (raising) blocked kernel
    # every input still gets a gradient: the floor keeps every projection in the graph
    assert all(x.grad is not None and x.grad.abs().sum() > 0 for x in inputs)
    assert all(p.grad is not None for n, p in layer.self_attn.named_parameters()
               if n.split(".")[0] in ("q_proj", "k_proj", "v_proj", "out_proj"))


def test_the_full_layer_does_run_the_kernel(registry):
    """The control: the ``etc`` layer goes through the blocked kernel (so the fixture's trap is live)."""
    layer, step, _ = lvp.build_etc(512)
    with pytest.raises(AssertionError, match="the blocked kernel ran"):
        step()
