#!/usr/bin/env bash
# ETC tiny in fairseq's stock masked_lm task on real English Wikipedia text (fixed-block global tokens).
#
# Run from the repository root after `scripts/setup.sh` (which creates ./.venv):
#   bash examples/etc_tiny_mlm/run.sh
#
# Stages: 1) prepare data with `etc-prepare mlm --wikipedia-sample` (skipped when already complete),
#         2) a short fairseq-train of --arch etc_tiny on CPU, 3) fairseq-validate of the last checkpoint.
# Outputs go to runs/etc_tiny_mlm/ (git-ignored). The Wikipedia sample is fetched once with pip into
# $ETC_FAIRSEQ_CACHE (default: ./.cache, shared with the tests).
#
# Knobs (environment variables, defaults in brackets): MAX_UPDATE [1200], BATCH_SIZE [8], LR [2e-3],
# WARMUP [100], TOKENS_PER_SAMPLE [512], SEED [1], RUN_DIR [runs/etc_tiny_mlm], ETC_VENV [.venv].
set -euo pipefail

source "$(dirname "$0")/../common.sh" etc-prepare fairseq-train fairseq-validate
RUN_DIR=${RUN_DIR:-runs/etc_tiny_mlm}
DATA=$RUN_DIR/data
SAVE=$RUN_DIR/checkpoints
MAX_UPDATE=${MAX_UPDATE:-1200}
BATCH_SIZE=${BATCH_SIZE:-8}
LR=${LR:-2e-3}
WARMUP=${WARMUP:-100}
TOKENS_PER_SAMPLE=${TOKENS_PER_SAMPLE:-512}
SEED=${SEED:-1}

stage "1/3 prepare data -> $DATA"
if [ -f "$DATA/prepare.json" ] && [ -f "$DATA/bin/dict.txt" ]; then
  echo "already prepared ($DATA/prepare.json exists); delete $DATA to rebuild"
else
  # --overwrite: a directory without prepare.json is an interrupted run, rebuilt from scratch.
  # Lines are wrapped at TOKENS_PER_SAMPLE-2 pieces so that --sample-break-mode complete never meets a
  # line longer than a sample (one eos per line, one bos per sample).
  "$VENV_BIN/etc-prepare" mlm --wikipedia-sample --out "$DATA" --overwrite \
    --vocab-size 8000 --valid-fraction 0.05 --max-line-pieces $(( TOKENS_PER_SAMPLE - 2 )) --seed "$SEED"
fi

stage "2/3 train etc_tiny for $MAX_UPDATE updates (CPU) -> $SAVE"
# --required-batch-size-multiple 1: fairseq otherwise drops a last batch smaller than 8 blocks (here and in 3/3).
"$VENV_BIN/fairseq-train" "$DATA/bin" \
  --user-dir user_dir --task masked_lm --criterion masked_lm --arch etc_tiny \
  --sample-break-mode complete --tokens-per-sample "$TOKENS_PER_SAMPLE" \
  --optimizer adam --lr "$LR" --lr-scheduler polynomial_decay \
  --warmup-updates "$WARMUP" --total-num-update "$MAX_UPDATE" --max-update "$MAX_UPDATE" \
  --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 --log-format simple --log-interval 10 \
  --save-dir "$SAVE" --no-epoch-checkpoints --num-workers 0 --cpu --seed "$SEED"

stage "3/3 validate $SAVE/checkpoint_last.pt"
"$VENV_BIN/fairseq-validate" "$DATA/bin" \
  --path "$SAVE/checkpoint_last.pt" --user-dir user_dir --task masked_lm --criterion masked_lm \
  --sample-break-mode complete --tokens-per-sample "$TOKENS_PER_SAMPLE" \
  --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 --valid-subset valid --num-workers 0 --cpu

stage "done"
