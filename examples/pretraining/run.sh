#!/usr/bin/env bash
# ETC structured pretraining (whole-word MLM + CPC) of etc_tiny on real English Wikipedia text:
# the project's main end-to-end job (README's first command runs it through scripts/main.sh).
#
# Run from the repository root after `scripts/setup.sh` (which creates ./.venv):
#   bash examples/pretraining/run.sh
#
# Stages: 1) `etc-prepare pretrain --wikipedia-sample` (sentences, sentencepiece, one binarized item per
#         sentence; skipped when already complete), 2) fairseq-train --task etc_pretraining
#         --criterion cpc_mlm --arch etc_tiny on CPU with held-out validation every VALID_EVERY updates,
#         3) fairseq-validate of the last checkpoint (mlm/cpc loss and accuracy).
# Outputs go to runs/etc_pretraining/ (git-ignored); the Wikipedia sample is cached in $ETC_FAIRSEQ_CACHE.
#
# Knobs (environment variables, defaults in brackets): MAX_UPDATE [1500], VALID_EVERY [500],
# BATCH_SIZE [8], LR [2e-3], SEED [1], RUN_DIR [runs/etc_pretraining], ETC_VENV [.venv].
set -euo pipefail

source "$(dirname "$0")/../common.sh" etc-prepare fairseq-train fairseq-validate
RUN_DIR=${RUN_DIR:-runs/etc_pretraining}
DATA=$RUN_DIR/data
SAVE=$RUN_DIR/checkpoints
MAX_UPDATE=${MAX_UPDATE:-1500}
VALID_EVERY=${VALID_EVERY:-500}
BATCH_SIZE=${BATCH_SIZE:-8}
LR=${LR:-2e-3}
SEED=${SEED:-1}

stage "1/3 prepare sentence data -> $DATA"
if [ -f "$DATA/prepare.json" ] && [ -f "$DATA/bin/dict.txt" ]; then
  echo "already prepared ($DATA/prepare.json exists); delete $DATA to rebuild"
else
  "$VENV_BIN/etc-prepare" pretrain --wikipedia-sample --out "$DATA" --overwrite \
    --vocab-size 4000 --valid-docs 6 --seed "$SEED"
fi

stage "2/3 pretrain etc_tiny (MLM + CPC) for $MAX_UPDATE updates (CPU) -> $SAVE"
# --required-batch-size-multiple 1: fairseq otherwise drops a final batch smaller than 8 examples.
"$VENV_BIN/fairseq-train" "$DATA/bin" --user-dir user_dir \
  --task etc_pretraining --criterion cpc_mlm --arch etc_tiny \
  --max-long-len 512 --max-global-len 64 --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 \
  --optimizer adam --adam-betas '(0.9,0.98)' --weight-decay 0.01 --clip-norm 1.0 \
  --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates 50 --max-update "$MAX_UPDATE" \
  --validate-interval-updates "$VALID_EVERY" --save-interval-updates "$VALID_EVERY" --keep-interval-updates 1 \
  --no-epoch-checkpoints --log-format simple --log-interval 50 --num-workers 0 --cpu --seed "$SEED" \
  --save-dir "$SAVE"

stage "3/3 validate $SAVE/checkpoint_last.pt"
"$VENV_BIN/fairseq-validate" "$DATA/bin" --user-dir user_dir --task etc_pretraining \
  --path "$SAVE/checkpoint_last.pt" --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 \
  --num-workers 0 --cpu

stage "done"
