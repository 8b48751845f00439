#!/usr/bin/env bash
# Google's released ETC -> etc-fairseq -> fine-tuned on HotpotQA -> evaluated with the official metric.
#   bash examples/official_etc/run.sh [ETC_DIR]
# ETC_DIR: a downloaded official checkpoint directory (etc_config.json, model.ckpt.*, vocabulary), e.g.
# etc_base_2x_pretrain or etc_large. Without it, the fixture the official TensorFlow code wrote
# (tests/fixtures/official/separate: tiny config, random weights, 128-piece vocabulary) is used: that run
# shows the commands work end to end, its scores mean nothing.
#
# HotpotQA: HOTPOTQA_TRAIN / HOTPOTQA_DEV (the official hotpot_train_v1.1.json / hotpot_dev_distractor_v1.json)
# if you have them; otherwise the CONSTRUCTED files of examples/hotpotqa/construct.py (real Wikipedia
# paragraphs of the dump sample, hand-written questions; not HotpotQA results).
#
# Knobs: MAX_UPDATE [20], BATCH_SIZE [4], LR [5e-4], SEED [1], OUT [runs/official_etc, emptied at the start],
# ETC_VENV [.venv], EXTRA_TRAIN_ARGS (appended to fairseq-train, e.g. "--fp16" on a GPU; the script passes --cpu
# only when no GPU is visible).
set -euo pipefail
SRC=${1:-tests/fixtures/official/separate}
[ -n "${1:-}" ] && SRC=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")   # before common.sh moves to the repository root
source "$(dirname "$0")/../common.sh"
PY=$VENV_BIN/python
[ -d "$SRC" ] || { echo "error: $SRC: no such official checkpoint directory" >&2; exit 1; }
OUT=${OUT:-runs/official_etc}
MAX_UPDATE=${MAX_UPDATE:-20}
BATCH_SIZE=${BATCH_SIZE:-4}
LR=${LR:-5e-4}
SEED=${SEED:-1}
CPU=()
if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then CPU=(--cpu); fi
rm -rf "$OUT"
mkdir -p "$OUT"

stage "1/6 etc-lift $SRC -> $OUT/model (checkpoint, dict.txt, tokenizer, etc_tokenizer.json)"
$PY -m etc_fairseq.cli.lift "$SRC" --out "$OUT/model/model.pt"

stage "2/6 the converted model against the official outputs (fixture directories hold them)"
$PY - "$SRC" "$OUT/model" <<'PY'
import sys
from pathlib import Path

import numpy as np
import torch

from etc_fairseq.models import EtcModel
from etc_fairseq.official import OFFICIAL_INPUT_NAMES, forward_official_inputs

src, model_dir = Path(sys.argv[1]), sys.argv[2]
io = src / "official_io.npz"
if not io.is_file():
    print(f"{io}: not there (a released checkpoint); skipped")
    sys.exit(0)
hub = EtcModel.from_pretrained(model_dir, checkpoint_file="model.pt").eval()
z = np.load(io)
# the official code's own inputs, official token ids included: etc-lift recorded their rows (etc_tokenizer.json)
feats = {k: z[k] for k in OFFICIAL_INPUT_NAMES if k in z.files}
with torch.no_grad():
    long_out, global_out = forward_official_inputs(hub, feats)
print("max |ours - official|: long %.2e, global %.2e" % (
    np.abs(long_out.numpy() - z["long_output"]).max(), np.abs(global_out.numpy() - z["global_output"]).max()))
PY

stage "3/6 HotpotQA files"
if [ -n "${HOTPOTQA_TRAIN:-}" ] && [ -n "${HOTPOTQA_DEV:-}" ]; then
  TRAIN=$HOTPOTQA_TRAIN; DEV=$HOTPOTQA_DEV
  echo "official files: $TRAIN, $DEV"
else
  TRAIN=$OUT/files/constructed_train.json; DEV=$OUT/files/constructed_dev.json
  DUMP=$(wikipedia_dump)
  $PY examples/hotpotqa/construct.py --dump "$DUMP" --out "$OUT/files"
fi

stage "4/6 etc-prepare hotpotqa --from-model $OUT/model -> $OUT/data"
$PY -m etc_fairseq.cli.prepare hotpotqa --from-model "$OUT/model" --train "$TRAIN" --valid "$DEV" --out "$OUT/data"

stage "5/6 fairseq-train --finetune-from-model $OUT/model/model.pt ($MAX_UPDATE updates; no model flags)"
# shellcheck disable=SC2086
$PY -m fairseq_cli.train "$OUT/data" --user-dir user_dir --task etc_hotpotqa --criterion etc_hotpotqa --arch etc \
  --finetune-from-model "$OUT/model/model.pt" \
  --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 \
  --optimizer adam --adam-betas '(0.9,0.98)' --lr "$LR" --lr-scheduler fixed --clip-norm 1.0 \
  --max-update "$MAX_UPDATE" --no-epoch-checkpoints --disable-validation \
  --log-format simple --log-interval 10 --num-workers 0 --seed "$SEED" "${CPU[@]}" ${EXTRA_TRAIN_ARGS:-} \
  --save-dir "$OUT/checkpoints"

stage "6/6 etc-predict (supporting-fact threshold tuned on dev) + etc-evaluate (official HotpotQA metric)"
$PY -m etc_fairseq.cli.predict hotpotqa --path "$OUT/checkpoints/checkpoint_last.pt" --data "$OUT/data" \
  --split valid --tune-sp-threshold --output "$OUT/dev_predictions.json" --report "$OUT/dev_report.json"
$PY -m etc_fairseq.cli.evaluate hotpotqa --predictions "$OUT/dev_predictions.json" --gold "$DEV" \
  --output "$OUT/dev_metrics.json"

stage "done"
