"""What every criterion's ``reduce_metrics`` does, once: sum a key over the logging outputs of all workers,
log a loss in base 2 per sample, and log ratios of summed counts (derived, so they are exact over a whole
epoch rather than an average of per-batch ratios).

A criterion logs sums in ``forward`` (e.g. ``"mlm_correct"`` and ``"mlm_count"``) and in ``reduce_metrics``
calls::

    log_mean_loss(logging_outputs)
    log_ratios(logging_outputs, {"mlm_accuracy": Ratio("mlm_correct", "mlm_count", 100.0)})

which logs ``mlm_accuracy = round(100 * sum(mlm_correct) / sum(mlm_count), 3)`` (NaN when the count is 0).
fairseq is imported only when logging.

Two helpers for ``forward`` keep a criterion's training step free of host reads in a static graph
(:func:`etc_fairseq.tracing.static_graph`: ``torch.compile``, or tensors on an XLA device, i.e.
``fairseq-train --tpu``): :func:`logged` (a count or sum for the logging output) and
:func:`loss_per_sample_size` (a loss normalised by a count that is only known on the device).
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from etc_fairseq.tracing import static_graph

#: scale a loss in nats by this to log it in bits (fairseq's convention)
NATS_TO_BITS = 1.0 / math.log(2)


class Ratio(NamedTuple):
    """A derived metric ``scale * sum(numerator) / sum(denominator)``.

    Attributes:
        numerator, denominator: logging-output keys (summed over workers and the epoch).
        scale: e.g. 100.0 for percent, :data:`NATS_TO_BITS` for a loss.
        digits: rounding of the logged value.
        empty: the value when the denominator's sum is 0.
    """

    numerator: str
    denominator: str
    scale: float = 1.0
    digits: int = 3
    empty: float = float("nan")


def logged(value: torch.Tensor) -> Union[int, float, torch.Tensor]:
    """A scalar tensor for a logging output: a Python int (integer dtypes) or float eagerly; in a static graph
    the detached tensor itself, which fairseq reads only when it logs (``--log-interval``), not in the step."""
    value = value.detach()
    if static_graph(value):
        return value
    return int(value) if not value.dtype.is_floating_point else float(value)


def loss_per_sample_size(loss: torch.Tensor, count: torch.Tensor) -> Tuple[torch.Tensor, Union[int, torch.Tensor]]:
    """``(loss, sample_size)`` to return from a criterion whose loss is a sum over ``count`` (int64 scalar
    tensor) labelled items.

    Eagerly: ``(loss, int(count))``; fairseq divides the summed gradients by the summed sample size. In a
    static graph fairseq would read a tensor ``sample_size`` on the host (``sample_size or 1.0`` in
    ``Trainer.train_step``), so the loss is divided here and the sample size is 1: the same update on one
    worker with ``--update-freq 1`` (otherwise the mean of the per-batch means, as ``cpc_mlm`` always does).
    """
    if static_graph(count):
        return loss / count.clamp(min=1), 1
    return loss, int(count)


def total(logging_outputs: Iterable[Mapping], key: str) -> float:
    """``key`` summed over the logging outputs (missing = 0)."""
    return sum(float(log.get(key, 0)) for log in logging_outputs)


def log_mean_loss(logging_outputs: Sequence[Mapping], key: str = "loss", sample_size: Optional[float] = None) -> None:
    """Log ``sum(key) / sample_size`` in bits (``sample_size`` default: the summed ``"sample_size"``)."""
    from fairseq import metrics

    n = total(logging_outputs, "sample_size") if sample_size is None else sample_size
    metrics.log_scalar(key, total(logging_outputs, key) / max(n, 1) * NATS_TO_BITS, n, round=3)


def log_ratios(logging_outputs: Sequence[Mapping], ratios: Mapping[str, Ratio]) -> None:
    """Log every numerator and denominator of ``ratios`` as a hidden sum (``_key``) and each ratio as a
    derived metric named by its key in ``ratios``."""
    from fairseq import metrics

    keys = dict.fromkeys(k for r in ratios.values() for k in (r.numerator, r.denominator))
    for key in keys:
        metrics.log_scalar_sum("_" + key, total(logging_outputs, key))
    for name, r in ratios.items():
        metrics.log_derived(name, _ratio_fn(r))


def _ratio_fn(r: Ratio):
    def fn(meters) -> float:
        d = meters["_" + r.denominator].sum
        return round(r.scale * meters["_" + r.numerator].sum / d, r.digits) if d > 0 else r.empty

    return fn
