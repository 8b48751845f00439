#!/usr/bin/env bash
# Creates ./.venv with everything etc-fairseq needs, without CUDA wheels or torchaudio.
# Idempotent: re-running is a no-op unless setup.py or this script changed.
#
# Why each step is explicit:
#   - torch is installed first, pinned (ETC_TORCH, default 2.13.0): an unpinned torch, or any package
#     that requires torchaudio, pulls the CUDA build (GBs). A pinned torch already present satisfies
#     every later `torch>=...` requirement, so nothing else pulls it.
#   - fairseq is installed with --no-deps: every fairseq 0.12 release declares torchaudio. On Python
#     >= 3.11 stock fairseq 0.12.2 does not import (mutable dataclass defaults), so the ve-fairseq
#     0.12.3 cp311 wheel (same import name) is used; on older Pythons, fairseq 0.12.2. fairseq's real
#     runtime dependencies are declared in our setup.py instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${ETC_VENV:-.venv}
TORCH_SPEC=${ETC_TORCH:-torch==2.13.0}
stamp="$VENV/.etc-setup-$(cat setup.py scripts/setup.sh | sha1sum | cut -c1-12)"
if [ -f "$stamp" ]; then
  exit 0
fi
echo "[setup] creating $VENV with $($PY --version)"
[ -x "$VENV/bin/python" ] || $PY -m venv "$VENV"
pip="$VENV/bin/python -m pip"
$pip install -q --upgrade pip
$pip install -q "$TORCH_SPEC"
if "$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  $pip install -q --no-deps "ve-fairseq==0.12.3"
else
  $pip install -q --no-deps "fairseq==0.12.2"
fi
$pip install -q -e ".[all]"
echo "[setup] pip's 've-fairseq requires torchaudio' is expected and harmless (docs/installing.md)"
"$VENV/bin/python" -c 'import torch, fairseq, etc_fairseq; print("[setup] torch", torch.__version__, "fairseq", fairseq.__version__, "etc_fairseq", etc_fairseq.__version__)'
rm -f "$VENV"/.etc-setup-*
touch "$stamp"
