"""The probe run on an NVIDIA H200 on 27 Nov 2026 (torch 2.11.0+cu130, triton 3.6.0), after the suite's first
run spent its time in the exactness part's flex compilations: attention alone, bf16, forward + backward, batch
1, 12 heads of 64, r = 84, 256 global tokens, 16,384 long tokens; SDPA (flash, no mask) over the same 16,640
tokens, the blocked kernel, then flex attention (first call = compilation). Run from the repository root as
``python3 probe.py`` (it was copied there); its output is ``probe.log`` beside this file. It calls the suite's
own functions at the commit the suite ran (9ea7e6b)."""
import time, torch
from benchmarks import gpu_suite as g
run = g.Run("cuda", False, 1e9)
L = 16384
sdpa, sp = g._peer_step("sdpa", run, L, 256, torch.bfloat16, True)
r = run.time(sdpa, 2, 5); print("sdpa ms", r["time_ms"], "tflops", g._tflops(sp, 12, True, r["time_ms"]), flush=True)
etc, plan_ms, pairs = g._etc_steps(run, L, 256, torch.bfloat16, True)
print("plan ms", plan_ms, "pairs", pairs, flush=True)
r = run.time(etc["blocked"], 1, 3); print("blocked ms", r["time_ms"], "tflops", g._tflops(pairs, 12, True, r["time_ms"]), flush=True)
t0 = time.perf_counter(); etc["flex"](); run.sync(); print("flex first call s", time.perf_counter() - t0, flush=True)
r = run.time(etc["flex"], 1, 5); print("flex ms", r["time_ms"], "tflops", g._tflops(pairs, 12, True, r["time_ms"]), "peak MB", r["peak_mb"], flush=True)
