#!/usr/bin/env bash
# The project's main job: set up ./.venv, prepare real Wikipedia text as sentences, pretrain etc_tiny
# with ETC's whole-word MLM + CPC (fairseq-train --task etc_pretraining --criterion cpc_mlm) and
# validate it with fairseq-validate. See examples/pretraining/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bash examples/pretraining/run.sh "$@"
