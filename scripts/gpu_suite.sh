#!/usr/bin/env bash
# Run benchmarks/gpu_suite.py on a GPU machine that has no fairseq (the suite needs the fairseq-free core,
# torch, triton, transformers, numpy, safetensors; docs/gpu.md).
#
#   bash scripts/gpu_suite.sh [WHEEL_DIR] [-- SUITE_ARGS...]
#
# WHEEL_DIR: *.whl files installed first with pip --no-deps --no-index (cp312 manylinux wheels of whatever the
# machine lacks). None is required on a machine with the packages above; optional: a flash-attn wheel built for
# the machine's torch, so that ModernBERT runs its flash_attention_2 (without it the suite measures ModernBERT
# with flex_attention, else sdpa, and records which).
# The suite stops starting parts after its time budget (--budget-s, 450 s) and the script after 8 minutes;
# every finished part is in the JSON either way (benchmarks/results/gpu_suite_cuda.json unless --out).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  wheels=$1; shift
  shopt -s nullglob
  files=("$wheels"/*.whl)
  if [ ${#files[@]} -gt 0 ]; then
    echo "[gpu_suite] installing ${#files[@]} wheel(s) from $wheels"
    $PY -m pip install -q --no-deps --no-index "${files[@]}"
  fi
fi
[ "${1:-}" = "--" ] && shift
$PY - <<'EOF'
import importlib, sys
for name in ("torch", "triton", "transformers", "numpy", "safetensors"):
    try:
        print(f"[gpu_suite] {name} {importlib.import_module(name).__version__}")
    except ImportError:
        print(f"[gpu_suite] {name} missing", file=sys.stderr)
import torch
print(f"[gpu_suite] cuda available: {torch.cuda.is_available()}"
      + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
EOF
OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} timeout --signal=INT 480 $PY -m benchmarks.gpu_suite "$@"
