#!/usr/bin/env bash
# ETC through fairseq's XLA training loop on the PJRT CPU backend, compared with the plain CPU run
# (benchmarks/xla_check.py; docs/tpu.md has the figures and the commands for a real TPU VM).
#
# Creates ./.venv-xla (git-ignored; ETC_XLA_VENV overrides) with the torch / torch-xla pair, fairseq and this
# project, then runs benchmarks/xla_check.py with that interpreter; arguments are passed on, e.g.
#   bash scripts/xla_check.sh --jobs pretraining --updates 12
#
# Why a separate virtualenv: torch-xla 2.9.0 is built against torch 2.9.0 exactly, the project's .venv has
# torch 2.13. The only Linux x86_64 torch 2.9.0 on the package registry is the CUDA build (its nvidia-*
# wheels, about 3 GB, come with it; the +cpu build is not there). It runs on the CPU as well and is what a
# TPU VM installs too. ETC_XLA_TORCH / ETC_XLA_SPEC override the pins (e.g. a local torch==2.9.0+cpu wheel).
# Idempotent: re-running skips the installation unless setup.py or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${ETC_XLA_VENV:-.venv-xla}
TORCH_SPEC=${ETC_XLA_TORCH:-torch==2.9.0}
XLA_SPEC=${ETC_XLA_SPEC:-torch-xla==2.9.0}
stamp="$VENV/.etc-xla-setup-$(cat setup.py scripts/xla_check.sh | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "[xla_check] creating $VENV: $TORCH_SPEC, $XLA_SPEC, ve-fairseq 0.12.3 (--no-deps), etc-fairseq"
  [ -x "$VENV/bin/python" ] || $PY -m venv "$VENV"
  pip="$VENV/bin/python -m pip"
  $pip install -q --upgrade pip
  # one resolver run for the pair, so pip cannot pick a torch that torch-xla was not built against
  $pip install -q "$TORCH_SPEC" "$XLA_SPEC"
  $pip install -q --no-deps "ve-fairseq==0.12.3"
  # the project with its run-time dependencies; the pinned torch already satisfies torch>=2.1
  $pip install -q -e .
  "$VENV/bin/python" - "$TORCH_SPEC" <<'PYEOF'
import sys

import fairseq
import torch
import torch_xla

want = sys.argv[1].split("==")[-1]
if not torch.__version__.startswith(want):
    sys.exit(f"[xla_check] torch {torch.__version__} was installed, {want} was asked for: torch-xla needs its own torch")
print("[xla_check] torch", torch.__version__, "torch_xla", torch_xla.__version__, "fairseq", fairseq.__version__)
PYEOF
  rm -f "$VENV"/.etc-xla-setup-*
  touch "$stamp"
fi
export ETC_FAIRSEQ_CACHE=${ETC_FAIRSEQ_CACHE:-$PWD/.cache}
exec "$VENV/bin/python" benchmarks/xla_check.py "$@"
