#!/usr/bin/env bash
# Set up ./.venv and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export ETC_FAIRSEQ_CACHE="${ETC_FAIRSEQ_CACHE:-$PWD/.cache}"
exec .venv/bin/python -m pytest tests -q -ra --durations=15 "$@"
