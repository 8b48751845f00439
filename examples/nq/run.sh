#!/usr/bin/env bash
# Natural Questions with ETC, end to end on CPU, from official-format files to the official metrics:
#   construct.py (CONSTRUCTED NQ-format files on real Wikipedia text) -> etc-prepare nq -> fairseq-train
#   --task etc_nq (fine-tuning a pretrained etc_tiny) -> fairseq-validate (official long/short P/R/F1)
#   -> etc-predict nq (official prediction JSON) -> etc-evaluate nq (official nq_eval rules).
#
# Run from the repository root after `scripts/setup.sh` (which creates ./.venv) and after
# examples/pretraining/run.sh (its checkpoint and tokenizer are reused; override with PRETRAINED / PRETRAIN_BIN):
#   bash examples/nq/run.sh
#
# Layout as in the paper for long inputs of 512: stride 128, 128 global tokens (CLS, one per question piece,
# one per paragraph candidate in the window). Outputs go to runs/nq/ (git-ignored).
#
# Knobs (environment variables, defaults in brackets): MAX_UPDATE [600], VALID_EVERY [200], LOG_INTERVAL [50],
# WARMUP [50], BATCH_SIZE [8], LR [1e-3], SEED [1], RUN_DIR [runs/nq], ETC_VENV [.venv],
# PRETRAINED [runs/etc_pretraining/checkpoints/checkpoint_last.pt], PRETRAIN_BIN [runs/etc_pretraining/data/bin].
set -euo pipefail

source "$(dirname "$0")/../common.sh" etc-prepare fairseq-train fairseq-validate etc-predict etc-evaluate
RUN_DIR=${RUN_DIR:-runs/nq}
PRETRAINED=${PRETRAINED:-runs/etc_pretraining/checkpoints/checkpoint_last.pt}
PRETRAIN_BIN=${PRETRAIN_BIN:-runs/etc_pretraining/data/bin}
MAX_UPDATE=${MAX_UPDATE:-600}
VALID_EVERY=${VALID_EVERY:-200}
LOG_INTERVAL=${LOG_INTERVAL:-50}
WARMUP=${WARMUP:-50}
BATCH_SIZE=${BATCH_SIZE:-8}
LR=${LR:-1e-3}
SEED=${SEED:-1}

if [ ! -f "$PRETRAINED" ] || [ ! -f "$PRETRAIN_BIN/dict.txt" ]; then
  echo "error: no pretrained checkpoint $PRETRAINED or tokenizer $PRETRAIN_BIN; run examples/pretraining/run.sh first" >&2
  exit 1
fi

stage "1/6 CONSTRUCTED NQ-format files on real Wikipedia text -> $RUN_DIR/raw"
DUMP=$(wikipedia_dump)
"$VENV_BIN/python" examples/nq/construct.py --dump "$DUMP" --out "$RUN_DIR/raw" --train 150 --valid 40 --seed "$SEED"

stage "2/6 etc-prepare nq -> $RUN_DIR/data"
"$VENV_BIN/etc-prepare" nq --train "$RUN_DIR/raw/nq-train.jsonl.gz" --valid "$RUN_DIR/raw/nq-dev.jsonl" \
  --pretrain-dir "$PRETRAIN_BIN" --max-long-len 512 --doc-stride 128 --max-global-len 128 \
  --out "$RUN_DIR/data" --overwrite

COMMON=(--user-dir user_dir --task etc_nq --criterion etc_nq --max-long-len 512 --max-global-len 128
        --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 --num-workers 0 --cpu)

stage "3/6 fine-tune etc_tiny for $MAX_UPDATE updates (CPU) -> $RUN_DIR/checkpoints"
"$VENV_BIN/fairseq-train" "$RUN_DIR/data" "${COMMON[@]}" --arch etc_tiny \
  --finetune-from-model "$PRETRAINED" \
  --optimizer adam --adam-betas '(0.9,0.98)' --clip-norm 1.0 --lr "$LR" --lr-scheduler inverse_sqrt \
  --warmup-updates "$WARMUP" --max-update "$MAX_UPDATE" --validate-interval-updates "$VALID_EVERY" --save-interval-updates "$VALID_EVERY" \
  --keep-interval-updates 1 --no-epoch-checkpoints --best-checkpoint-metric nq_long_f1 --maximize-best-checkpoint-metric \
  --log-format simple --log-interval "$LOG_INTERVAL" --seed "$SEED" --save-dir "$RUN_DIR/checkpoints"

stage "4/6 fairseq-validate (official metrics over whole examples)"
"$VENV_BIN/fairseq-validate" "$RUN_DIR/data" "${COMMON[@]}" --path "$RUN_DIR/checkpoints/checkpoint_last.pt" --valid-subset valid

stage "5/6 etc-predict nq -> $RUN_DIR/predictions.json"
"$VENV_BIN/etc-predict" nq --path "$RUN_DIR/checkpoints/checkpoint_last.pt" --data "$RUN_DIR/data" --split valid \
  --output "$RUN_DIR/predictions.json" --device cpu

stage "6/6 etc-evaluate nq (official nq_eval rules, gold = the 5-way annotated dev file)"
"$VENV_BIN/etc-evaluate" nq --predictions "$RUN_DIR/predictions.json" --gold "$RUN_DIR/raw/nq-dev.jsonl" \
  --output "$RUN_DIR/metrics.json"

stage "done"
