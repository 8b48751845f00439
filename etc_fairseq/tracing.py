"""Leaf (torch only): whether the current computation is being traced into a static graph.

Two ways ETC runs as a compiled graph: ``torch.compile`` (dynamo traces the Python code) and PyTorch/XLA
(``fairseq-train --tpu``: tensors on an ``xla`` device are lazy, every op is recorded and the graph is
compiled at the step's end). In both, reading a tensor's value on the host (``.item()``, ``bool(t)``,
``int(t.max())``, boolean-mask indexing) cuts the graph and, when the value decides a shape, makes every
batch a new graph to compile. Code that has an eager variant with such reads (input validation, exact-size
outputs) asks :func:`static_graph` and takes the static variant: same values, fixed shapes, counts kept as
tensors.
"""
from typing import Optional

import torch


def static_graph(t: Optional[torch.Tensor] = None) -> bool:
    """True while ``torch.compile`` traces, or when ``t`` lives on an XLA device (lazy tensors)."""
    return torch.compiler.is_compiling() or (t is not None and t.device.type == "xla")
