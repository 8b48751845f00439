#!/usr/bin/env bash
# HotpotQA (distractor setting) with ETC: official JSON -> etc-prepare hotpotqa -> fairseq-train from a
# pretrained etc_tiny checkpoint -> fairseq-validate -> etc-predict (supporting-fact threshold tuned on dev)
# -> etc-evaluate. Everything on CPU.
#
# Run from the repository root after `scripts/setup.sh`:
#   bash examples/hotpotqa/run.sh
#
# Data: the official files if you have them (HOTPOTQA_TRAIN=hotpot_train_v1.1.json
# HOTPOTQA_DEV=hotpot_dev_distractor_v1.json, optional HOTPOTQA_TEST=a file without answers). Without them
# (nothing is downloaded), the script writes small CONSTRUCTED files in the official format: real English
# Wikipedia paragraphs (the first sentences of 5 articles of the dump sample, CC BY-SA 3.0) with questions,
# answers and supporting facts written by hand (examples/hotpotqa/construct.py). Numbers on those files only
# show that the pipeline runs; they are not HotpotQA results.
#
# Pretrained model: PRETRAINED (default runs/etc_pretraining/checkpoints/checkpoint_last.pt) with its
# tokenizer directory PRETRAIN_DIR (default runs/etc_pretraining/data/bin); if missing, they are built with
# examples/pretraining/run.sh and PRETRAIN_UPDATES updates [300].
#
# Knobs: MAX_UPDATE [40], BATCH_SIZE [4], LR [5e-4], SEED [1], RUN_DIR [runs/hotpotqa], ETC_VENV [.venv],
# FLAT=1 for the flat-structure ablation.
set -euo pipefail

source "$(dirname "$0")/../common.sh" etc-prepare fairseq-train fairseq-validate etc-predict etc-evaluate
RUN_DIR=${RUN_DIR:-runs/hotpotqa}
PRETRAINED=${PRETRAINED:-runs/etc_pretraining/checkpoints/checkpoint_last.pt}
PRETRAIN_DIR=${PRETRAIN_DIR:-runs/etc_pretraining/data/bin}
MAX_UPDATE=${MAX_UPDATE:-40}
BATCH_SIZE=${BATCH_SIZE:-4}
LR=${LR:-5e-4}
SEED=${SEED:-1}
FLAT_ARGS=()
if [ "${FLAT:-0}" = 1 ]; then FLAT_ARGS=(--flat-structure); fi

stage "1/6 pretrained etc_tiny checkpoint"
if [ -f "$PRETRAINED" ] && [ -f "$PRETRAIN_DIR/dict.txt" ]; then
  echo "using $PRETRAINED (tokenizer: $PRETRAIN_DIR)"
else
  MAX_UPDATE=${PRETRAIN_UPDATES:-300} VALID_EVERY=${PRETRAIN_UPDATES:-300} ETC_VENV=${ETC_VENV:-.venv} \
    bash examples/pretraining/run.sh
fi

stage "2/6 HotpotQA files"
FILES=$RUN_DIR/files
mkdir -p "$FILES"
if [ -n "${HOTPOTQA_TRAIN:-}" ] && [ -n "${HOTPOTQA_DEV:-}" ]; then
  TRAIN=$HOTPOTQA_TRAIN; DEV=$HOTPOTQA_DEV; TEST=${HOTPOTQA_TEST:-}
  echo "official files: $TRAIN, $DEV ${TEST:+, $TEST}"
else
  TRAIN=$FILES/constructed_train.json; DEV=$FILES/constructed_dev.json; TEST=$FILES/constructed_test.json
  DUMP=$(wikipedia_dump)
  "$VENV_BIN/python" examples/hotpotqa/construct.py --dump "$DUMP" --out "$FILES"
fi

stage "3/6 etc-prepare hotpotqa -> $RUN_DIR/data"
"$VENV_BIN/etc-prepare" hotpotqa --train "$TRAIN" --valid "$DEV" ${TEST:+--test "$TEST"} \
  --out "$RUN_DIR/data" --overwrite --pretrain-dir "$PRETRAIN_DIR" "${FLAT_ARGS[@]}"

stage "4/6 fine-tune etc_tiny (hard g2l) for $MAX_UPDATE updates -> $RUN_DIR/checkpoints"
"$VENV_BIN/fairseq-train" "$RUN_DIR/data" --user-dir user_dir \
  --task etc_hotpotqa --criterion etc_hotpotqa --arch etc_tiny --hard-g2l \
  --finetune-from-model "$PRETRAINED" \
  --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 \
  --optimizer adam --adam-betas '(0.9,0.98)' --lr "$LR" --lr-scheduler fixed --clip-norm 1.0 \
  --max-update "$MAX_UPDATE" --no-epoch-checkpoints --validate-interval 10 --save-interval 10 \
  --log-format simple --log-interval 10 --num-workers 0 --cpu --seed "$SEED" \
  --save-dir "$RUN_DIR/checkpoints"

stage "5/6 fairseq-validate (metrics at the criterion's --sp-threshold 0.5)"
"$VENV_BIN/fairseq-validate" "$RUN_DIR/data" --user-dir user_dir --task etc_hotpotqa --criterion etc_hotpotqa \
  --path "$RUN_DIR/checkpoints/checkpoint_last.pt" --batch-size "$BATCH_SIZE" --num-workers 0 --cpu

stage "6/6 etc-predict (threshold tuned on dev) + etc-evaluate"
"$VENV_BIN/etc-predict" hotpotqa --path "$RUN_DIR/checkpoints/checkpoint_last.pt" --data "$RUN_DIR/data" \
  --split valid --tune-sp-threshold --output "$RUN_DIR/dev_predictions.json" --report "$RUN_DIR/dev_report.json"
"$VENV_BIN/etc-evaluate" hotpotqa --predictions "$RUN_DIR/dev_predictions.json" --gold "$DEV" \
  --output "$RUN_DIR/dev_metrics.json"
if [ -n "$TEST" ]; then
  THRESHOLD=$("$VENV_BIN/python" -c "import json,sys; print(json.load(open(sys.argv[1]))['sp_threshold'])" "$RUN_DIR/dev_report.json")
  "$VENV_BIN/etc-predict" hotpotqa --path "$RUN_DIR/checkpoints/checkpoint_last.pt" --data "$RUN_DIR/data" \
    --split test --sp-threshold "$THRESHOLD" --output "$RUN_DIR/test_predictions.json"
fi

stage "done"
