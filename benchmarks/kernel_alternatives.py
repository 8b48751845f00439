"""The alternatives the performance issue names for the attention kernel's inner steps, measured on
the production kernel's own chunk shapes and codes, each checked for exactness against what the
kernel does.

Input: the long-query half of one attention call (batch 1, 12 heads, head_dim 64, radius 84, 256
global tokens, 31 relative labels, the label layout of ``attention_scaling.py``), laid out by
:mod:`etc_fairseq.attention.blocked` into chunks of ``LONG_CHUNK`` queries against ``Q + 2r``
window keys plus the global keys, with one uint8 code per query-key pair (a label id, "allowed,
no label" or "masked") that indexes a per-query table ``[q.e_label..., 0, -big]``.

Steps compared (time summed over all chunks of the input; 2 CPU threads; median of ``--repeats``):

* **bias** (forward: every pair's table entry, ``[B, H, Q, K]`` from ``[B, H, Q, N+2]``):
  ``gather`` (the kernel's), ``embedding`` (``F.embedding`` on the flattened table with
  row-offset indices), ``one_hot`` (one-hot codes times the table, a batched product).
* **bias_grad** (backward: the table gradient, summed per code): ``scatter_spread4`` (the
  kernel's: ``scatter_add_`` with key column ``k`` going to copy ``k % 4`` of its entry),
  ``scatter`` (one entry per code), ``index_add`` (flattened, what ``F.embedding``'s backward
  does), ``one_hot`` (dlogits times the one-hot codes).
* **half** (the whole long-query half, bias included; ``fwd`` under ``torch.no_grad``, ``fwd+bwd``
  with gradients for the queries, keys, values and label vectors): ``kernel`` (the production
  ``long_query_attention``, whose backward recomputes each chunk), ``sdpa_blocks``
  (``F.scaled_dot_product_attention`` per chunk with the gathered bias as a float ``attn_mask``;
  PyTorch picks its backend: without gradients its fused CPU kernel, with a bias that needs a
  gradient the unfused math path, since the fused kernels return no gradient for the mask).

Usage::

    python -m benchmarks.kernel_alternatives                  # long_len 4096, 3 repeats
    python -m benchmarks.kernel_alternatives --quick          # long_len 2048, 1 repeat

Writes ``benchmarks/results/kernel_alternatives.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Dict, List, Optional


from benchmarks.harness import RESULTS_DIR, command_line, load_average, machine_info, write_json
from benchmarks.harness import median_time as _timed
from benchmarks.inputs import GLOBAL_LEN, attention_inputs


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time (s) of ``repeats`` calls after a warm-up."""
    return _timed(fn, repeats)["time_s"]


def chunk_layout(long_len: int):
    """The kernel's chunk layout for the long queries of ``attention_inputs(long_len, GLOBAL_LEN)``.

    Returns a dict: ``tensors``/``kw`` (the inputs), ``table`` float ``[B, H, n_pad, N + 2]`` (the
    kernel's per-query bias table), ``codes`` uint8 ``[B, n_chunks, Q, Q + 2r + G]``, ``chunk``, ``radius``.
    """
    import math

    import torch.nn.functional as F

    from etc_fairseq.attention import blocked
    from etc_fairseq.attention.common import band_key_in_range

    tensors, kw = attention_inputs(long_len, GLOBAL_LEN)
    q, rel = tensors["long_q"].detach(), tensors["long_rel_emb"].detach()
    r, chunk = kw["local_radius"], blocked.LONG_CHUNK
    n_labels = rel.shape[0]
    local = kw["l2l_mask"] & band_key_in_range(long_len, r)
    codes_a = blocked.pair_codes(local, kw["l2l_rel"], n_labels, True)  # [B, L, 2r+1]
    codes_b = blocked.pair_codes(kw["l2g_mask"], kw["l2g_rel"], n_labels, True)  # [B, L, G]
    n_pad = -(-long_len // chunk) * chunk
    codes = blocked.chunk_codes(codes_a, codes_b, r, chunk, n_labels + 1)  # [B, n_chunks, Q, Q + 2r + G]
    qs = F.pad(q / math.sqrt(q.shape[-1]), (0, 0, 0, n_pad - long_len))
    return dict(tensors=tensors, kw=kw, chunk=chunk, radius=r, codes=codes,
                table=blocked._bias_table(qs, rel, None, qs.dtype))


def bias_variants(lay) -> Dict[str, Callable[[int], object]]:
    """chunk index -> float ``[B, H, Q, K]`` bias, three ways."""
    import torch
    import torch.nn.functional as F

    table, codes, chunk = lay["table"], lay["codes"], lay["chunk"]
    B, H, _, n_codes = table.shape
    K = codes.shape[-1]
    row_off = (torch.arange(B * H * chunk) * n_codes).view(B, H, chunk, 1)  # [B, H, Q, 1]

    def gather(c):
        t = table[:, :, c * chunk:(c + 1) * chunk]
        return torch.gather(t, -1, codes[:, c].long().unsqueeze(1).expand(B, H, chunk, K))

    def embedding(c):
        t = table[:, :, c * chunk:(c + 1) * chunk].reshape(-1, 1)  # [B*H*Q*(N+2), 1]
        idx = codes[:, c].long().unsqueeze(1) + row_off  # [B, H, Q, K]
        return F.embedding(idx, t).squeeze(-1)

    def one_hot(c):
        t = table[:, :, c * chunk:(c + 1) * chunk]
        oh = F.one_hot(codes[:, c].long(), n_codes).to(t.dtype)  # [B, Q, K, N+2]
        return torch.einsum("bhqn,bqkn->bhqk", t, oh)

    return dict(gather=gather, embedding=embedding, one_hot=one_hot)


def bias_grad_variants(lay) -> Dict[str, Callable[[int, object], object]]:
    """(chunk index, dlogits ``[B, H, Q, K]``) -> table gradient ``[B, H, Q, N + 2]``, four ways."""
    import torch
    import torch.nn.functional as F

    table, codes, chunk = lay["table"], lay["codes"], lay["chunk"]
    B, H, _, n_codes = table.shape
    K = codes.shape[-1]
    spread = (torch.arange(K) % 4) * n_codes
    row_off = (torch.arange(B * H * chunk) * n_codes).view(B, H, chunk, 1)

    def scatter_spread4(c, dl):
        out = dl.new_zeros(B, H, chunk, 4 * n_codes)
        out.scatter_add_(-1, (codes[:, c].long() + spread).unsqueeze(1).expand(B, H, chunk, K), dl)
        return out.view(B, H, chunk, 4, n_codes).sum(3)

    def scatter(c, dl):
        out = dl.new_zeros(B, H, chunk, n_codes)
        return out.scatter_add_(-1, codes[:, c].long().unsqueeze(1).expand(B, H, chunk, K), dl)

    def index_add(c, dl):
        out = dl.new_zeros(B * H * chunk * n_codes)
        out.index_add_(0, (codes[:, c].long().unsqueeze(1) + row_off).reshape(-1), dl.reshape(-1))
        return out.view(B, H, chunk, n_codes)

    def one_hot(c, dl):
        oh = F.one_hot(codes[:, c].long(), n_codes).to(dl.dtype)
        return torch.einsum("bhqk,bqkn->bhqn", dl, oh)

    return dict(scatter_spread4=scatter_spread4, scatter=scatter, index_add=index_add, one_hot=one_hot)


def sdpa_blocks(lay, q, k, v, kb, vb, rel):
    """The long-query half as one fused-SDPA call per chunk (bias = gathered table, differentiable):
    float ``[B, H, n_pad, D]`` (rows with no allowed key are not zeroed here: the caller does)."""
    import math

    import torch
    import torch.nn.functional as F

    from etc_fairseq.attention import blocked

    r, chunk, codes = lay["radius"], lay["chunk"], lay["codes"]
    B, H, n, D = q.shape
    n_chunks = codes.shape[1]
    n_pad = n_chunks * chunk
    qs = F.pad(q / math.sqrt(D), (0, 0, 0, n_pad - n))
    table = blocked._bias_table(qs, rel, None, qs.dtype)
    ka = F.pad(k, (0, 0, r, r + n_pad - n))
    va = F.pad(v, (0, 0, r, r + n_pad - n))
    w = chunk + 2 * r
    outs = []
    for c in range(n_chunks):
        s = c * chunk
        kc = torch.cat([ka[:, :, s:s + w], kb], dim=2)
        vc = torch.cat([va[:, :, s:s + w], vb], dim=2)
        idx = codes[:, c].long().unsqueeze(1).expand(B, H, chunk, codes.shape[-1])
        bias = torch.gather(table[:, :, s:s + chunk], -1, idx)
        outs.append(F.scaled_dot_product_attention(qs[:, :, s:s + chunk], kc, vc, attn_mask=bias, scale=1.0))
    return torch.cat(outs, dim=2)


def run(long_len: int, repeats: int) -> List[Dict]:
    import torch

    from etc_fairseq.attention import blocked

    lay = chunk_layout(long_len)
    n_chunks = lay["codes"].shape[1]
    rows: List[Dict] = []

    def add(step, name, seconds, exact, current):
        rows.append(dict(long_len=long_len, step=step, variant=name, time_s=seconds, exact=exact,
                         is_kernel_choice=current))
        print(f"L={long_len} {step:10s} {name:16s} {seconds * 1e3:8.1f} ms  exact={exact}", file=sys.stderr)

    # bias (forward)
    variants = bias_variants(lay)
    ref = [variants["gather"](c) for c in range(n_chunks)]
    for name, fn in variants.items():
        exact = all(torch.equal(fn(c), ref[c]) for c in range(n_chunks))
        add("bias", name, median_time(lambda: [fn(c) for c in range(n_chunks)], repeats), exact, name == "gather")

    # bias gradient (backward), on a fixed random dlogits per chunk
    gen = torch.Generator().manual_seed(0)
    dls = [torch.randn(ref[c].shape, generator=gen) for c in range(n_chunks)]
    grads = bias_grad_variants(lay)
    gref = [grads["scatter"](c, dls[c]) for c in range(n_chunks)]
    for name, fn in grads.items():
        # summation order differs between variants: equal up to float32 rounding
        exact = all(torch.allclose(fn(c, dls[c]), gref[c], rtol=1e-5, atol=1e-4) for c in range(n_chunks))
        add("bias_grad", name, median_time(lambda: [fn(c, dls[c]) for c in range(n_chunks)], repeats), exact,
            name == "scatter_spread4")

    # whole long-query half: the kernel against SDPA per chunk
    t, kw = lay["tensors"], lay["kw"]
    names = ("long_q", "long_k", "long_v", "global_k", "global_v", "long_rel_emb")
    leaves = [t[x] for x in names]

    def kernel():
        return blocked.long_query_attention(
            *leaves[:5], local_radius=kw["local_radius"], l2l_mask=kw["l2l_mask"], l2g_mask=kw["l2g_mask"],
            l2l_rel=kw["l2l_rel"], l2g_rel=kw["l2g_rel"], rel_emb=leaves[5])

    # queries with no allowed key (the padding rows) get 0, as in the kernel
    live = (kw["l2l_mask"].any(-1) | kw["l2g_mask"].any(-1))[:, None, :, None].to(leaves[0].dtype)

    def blocks():
        return sdpa_blocks(lay, *leaves)[:, :, :long_len] * live

    with torch.no_grad():
        out_k, out_s = kernel(), blocks()
    fwd_exact = torch.allclose(out_k, out_s, rtol=1e-4, atol=1e-5)

    def fwd_bwd(fn):
        def step():
            for x in leaves:
                x.grad = None
            fn().sum().backward()
            return [x.grad.clone() for x in leaves]
        return step

    g_k, g_s = fwd_bwd(kernel)(), fwd_bwd(blocks)()
    bwd_exact = fwd_exact and all(torch.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(g_k, g_s))
    for name, fn in (("kernel", kernel), ("sdpa_blocks", blocks)):
        with torch.no_grad():
            add("half fwd", name, median_time(fn, repeats), fwd_exact, name == "kernel")
    for name, fn in (("kernel", kernel), ("sdpa_blocks", blocks)):
        add("half fwd+bwd", name, median_time(fwd_bwd(fn), repeats), bwd_exact, name == "kernel")
    return rows


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=None)
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (median); default 3, --quick 1")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="long_len 2048, 1 repeat")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "kernel_alternatives.json"))
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    repeats = args.repeats or (1 if args.quick else 3)
    lengths = args.lengths or ([2048] if args.quick else [4096])
    command = command_line(__spec__.name)
    print(f"command: {command}", flush=True)
    load_before = load_average()
    rows = [row for n in lengths for row in run(n, repeats)]
    lines = ["| long_len | step | variant | time ms | exact | the kernel's |", "|---:|---|---|---:|---|---|"]
    for x in rows:
        lines.append(f"| {x['long_len']} | {x['step']} | {x['variant']} | {1e3 * x['time_s']:.1f} | "
                     f"{'yes' if x['exact'] else 'NO'} | {'yes' if x['is_kernel_choice'] else ''} |")
    table = "\n".join(lines)
    print(table)
    result = dict(description="attention kernel inner steps: the issue's alternatives on the kernel's chunk shapes",
                  command=command, config=dict(global_len=GLOBAL_LEN, repeats=repeats, threads=args.threads),
                  machine=machine_info(args.threads), load_average_before=load_before,
                  load_average_after=load_average(), results=rows, markdown_table=table)
    write_json(args.out, result)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
