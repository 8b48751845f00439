#!/usr/bin/env bash
# The project's main job: set up ./.venv, prepare real Wikipedia text, train and validate etc_tiny
# through fairseq-train / fairseq-validate. See examples/etc_tiny_mlm/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bash examples/etc_tiny_mlm/run.sh "$@"
