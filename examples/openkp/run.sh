#!/usr/bin/env bash
# OpenKP end to end on CPU: etc-prepare openkp -> fairseq-train (etc_openkp, from a pre-trained etc_tiny
# checkpoint) -> fairseq-validate (P/R/F1 @1,@3,@5) -> etc-predict openkp -> etc-evaluate openkp.
#
# The official OpenKP files (MS MARCO) cannot be downloaded here, so stage 1 writes CONSTRUCTED pages in the
# official format whose text is real Wikipedia articles (examples/openkp/construct.py explains the made-up
# layout and keyphrases). With the real data, point TRAIN_JSONL / DEV_JSONL at OpenKPTrain.jsonl and
# OpenKPDev.jsonl and use the paper's lengths (MAX_LONG=4096 MAX_GLOBAL=512, a base/large model).
#
# Run from the repository root after examples/pretraining/run.sh (it provides the pre-trained checkpoint and
# the tokenizer/dictionary that the fine-tuning data must share):
#   bash examples/openkp/run.sh                  # with visual features
#   VISUAL=0 RUN_DIR=runs/openkp_novis bash examples/openkp/run.sh   # ablation: --no-visual-features
#
# Knobs (environment variables, defaults in brackets): PRETRAIN_RUN [runs/etc_pretraining] (its data/bin and
# checkpoints/checkpoint_last.pt), MAX_UPDATE [100], BATCH_SIZE [8], LR [1e-3], SEED [1], VISUAL [1],
# MAX_LONG [512], MAX_GLOBAL [64], MAX_LOSS [0] (1: the paper's "max loss"), RUN_DIR [runs/openkp],
# ETC_VENV [.venv], TRAIN_JSONL / DEV_JSONL [the CONSTRUCTED files].
set -euo pipefail

source "$(dirname "$0")/../common.sh" etc-prepare fairseq-train fairseq-validate etc-predict etc-evaluate
PRETRAIN_RUN=${PRETRAIN_RUN:-runs/etc_pretraining}
PRETRAIN_BIN=$PRETRAIN_RUN/data/bin
PRETRAINED=$PRETRAIN_RUN/checkpoints/checkpoint_last.pt
RUN_DIR=${RUN_DIR:-runs/openkp}
RAW=${RAW:-$RUN_DIR/raw}
DATA=$RUN_DIR/data
SAVE=$RUN_DIR/checkpoints
MAX_UPDATE=${MAX_UPDATE:-100}
BATCH_SIZE=${BATCH_SIZE:-8}
LR=${LR:-1e-3}
SEED=${SEED:-1}
VISUAL=${VISUAL:-1}
MAX_LOSS=${MAX_LOSS:-0}
MAX_LONG=${MAX_LONG:-512}
MAX_GLOBAL=${MAX_GLOBAL:-64}
TRAIN_JSONL=${TRAIN_JSONL:-$RAW/train.jsonl}
DEV_JSONL=${DEV_JSONL:-$RAW/dev.jsonl}

if [ ! -f "$PRETRAINED" ] || [ ! -f "$PRETRAIN_BIN/dict.txt" ]; then
  echo "error: no pre-trained checkpoint $PRETRAINED or $PRETRAIN_BIN/dict.txt; run examples/pretraining/run.sh first" >&2
  exit 1
fi

TASK_FLAGS=(--task etc_openkp --criterion etc_openkp --max-long-len "$MAX_LONG" --max-global-len "$MAX_GLOBAL")
[ "$VISUAL" = 0 ] && TASK_FLAGS+=(--no-visual-features)
[ "$MAX_LOSS" = 1 ] && TASK_FLAGS+=(--max-loss)

if [ "$TRAIN_JSONL" = "$RAW/train.jsonl" ] && [ ! -f "$RAW/train.jsonl" ]; then
  stage "1/6 CONSTRUCTED OpenKP-format pages from real Wikipedia articles -> $RAW"
  DUMP=$(wikipedia_dump)
  "$VENV_BIN/python" examples/openkp/construct.py --dump "$DUMP" --out "$RAW" --valid 20 --seed "$SEED"
fi

stage "2/6 etc-prepare openkp -> $DATA"
"$VENV_BIN/etc-prepare" openkp --train "$TRAIN_JSONL" --valid "$DEV_JSONL" --out "$DATA" --overwrite \
  --pretrain-dir "$PRETRAIN_BIN" --max-long-len "$MAX_LONG" --max-global-len "$MAX_GLOBAL"

stage "3/6 fine-tune etc_tiny for $MAX_UPDATE updates (CPU; visual features: $VISUAL) -> $SAVE"
rm -rf "$SAVE"  # fairseq would resume from an old checkpoint_last.pt instead of the pre-trained model
# --required-batch-size-multiple 1:
# fairseq otherwise drops a final batch smaller than 8 examples (also in fairseq-validate).
"$VENV_BIN/fairseq-train" "$DATA" --user-dir user_dir "${TASK_FLAGS[@]}" \
  --arch etc_tiny --finetune-from-model "$PRETRAINED" \
  --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 \
  --optimizer adam --adam-betas '(0.9,0.98)' --weight-decay 0.01 --clip-norm 1.0 \
  --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates 30 --max-update "$MAX_UPDATE" \
  --best-checkpoint-metric F1@3 --maximize-best-checkpoint-metric --no-epoch-checkpoints \
  --log-format simple --log-interval 10 --num-workers 0 --cpu --seed "$SEED" --save-dir "$SAVE"

stage "4/6 fairseq-validate $SAVE/checkpoint_best.pt"
"$VENV_BIN/fairseq-validate" "$DATA" --user-dir user_dir "${TASK_FLAGS[@]}" \
  --path "$SAVE/checkpoint_best.pt" --valid-subset valid --batch-size "$BATCH_SIZE" \
  --required-batch-size-multiple 1 --num-workers 0 --cpu

stage "5/6 etc-predict openkp -> $RUN_DIR/dev_predictions.jsonl"
"$VENV_BIN/etc-predict" openkp --path "$SAVE/checkpoint_best.pt" --data "$DATA" --split valid \
  --output "$RUN_DIR/dev_predictions.jsonl" --device cpu

stage "6/6 etc-evaluate openkp"
"$VENV_BIN/etc-evaluate" openkp --predictions "$RUN_DIR/dev_predictions.jsonl" --gold "$DEV_JSONL"

stage "done"
