#!/usr/bin/env bash
# WikiHop end to end on CPU: etc-prepare wikihop -> fairseq-train (etc_wikihop, from a pre-trained etc_tiny
# checkpoint) -> fairseq-validate -> etc-predict wikihop -> etc-evaluate wikihop.
#
# The official QAngaroo files cannot be downloaded here, so stage 1 writes CONSTRUCTED files in the official
# format whose supports are real Wikipedia paragraphs (examples/wikihop/construct.py explains the made-up
# queries and answers). With the real data, skip stage 1 and point TRAIN_JSON / DEV_JSON at train.json and
# dev.json of qangaroo_v1.1/wikihop/.
#
# Run from the repository root after examples/pretraining/run.sh (it provides the pre-trained checkpoint and
# the tokenizer/dictionary that the fine-tuning data must share):
#   bash examples/wikihop/run.sh
#
# Knobs (environment variables, defaults in brackets): PRETRAIN_RUN [runs/etc_pretraining] (its
# data/bin and checkpoints/checkpoint_last.pt; PRETRAIN_BIN and PRETRAINED name them separately), LAYERS [2]
# (the pre-trained etc_tiny's layers), MAX_UPDATE [150], BATCH_SIZE [8], LR [1e-3], WARMUP [20], SEED [1]
# (fine-tuning), VALID_EVERY [0: once per epoch; N: every N updates], RUN_DIR [runs/wikihop], ETC_VENV [.venv],
# TRAIN_JSON / DEV_JSON [the CONSTRUCTED files]; for the CONSTRUCTED files: QUERY [paragraph_mentions]
# (construct.py --query), TRAIN_RECORDS [200], VALID_RECORDS [50], DATA_SEED [1]; CANDIDATE_ATTENTION
# [mentions] (etc-prepare wikihop --candidate-attention).
set -euo pipefail

source "$(dirname "$0")/../common.sh" etc-prepare fairseq-train fairseq-validate etc-predict etc-evaluate
PRETRAIN_RUN=${PRETRAIN_RUN:-runs/etc_pretraining}
PRETRAIN_BIN=${PRETRAIN_BIN:-$PRETRAIN_RUN/data/bin}
PRETRAINED=${PRETRAINED:-$PRETRAIN_RUN/checkpoints/checkpoint_last.pt}
LAYERS=${LAYERS:-2}
RUN_DIR=${RUN_DIR:-runs/wikihop}
RAW=$RUN_DIR/raw
DATA=$RUN_DIR/data
SAVE=$RUN_DIR/checkpoints
MAX_UPDATE=${MAX_UPDATE:-150}
BATCH_SIZE=${BATCH_SIZE:-8}
LR=${LR:-1e-3}
WARMUP=${WARMUP:-20}
SEED=${SEED:-1}
VALID_EVERY=${VALID_EVERY:-0}
QUERY=${QUERY:-paragraph_mentions}
TRAIN_RECORDS=${TRAIN_RECORDS:-200}
VALID_RECORDS=${VALID_RECORDS:-50}
DATA_SEED=${DATA_SEED:-1}
CANDIDATE_ATTENTION=${CANDIDATE_ATTENTION:-mentions}
TRAIN_JSON=${TRAIN_JSON:-$RAW/train.json}
DEV_JSON=${DEV_JSON:-$RAW/dev.json}

if [ ! -f "$PRETRAINED" ] || [ ! -f "$PRETRAIN_BIN/dict.txt" ]; then
  echo "error: no pre-trained checkpoint $PRETRAINED or $PRETRAIN_BIN/dict.txt; run examples/pretraining/run.sh first" >&2
  exit 1
fi

if [ "$TRAIN_JSON" = "$RAW/train.json" ]; then
  stage "1/6 CONSTRUCTED WikiHop-format files from real Wikipedia paragraphs -> $RAW"
  DUMP=$(wikipedia_dump)
  "$VENV_BIN/python" examples/wikihop/construct.py --dump "$DUMP" --out "$RAW" --train "$TRAIN_RECORDS" \
    --valid "$VALID_RECORDS" --seed "$DATA_SEED" --query "$QUERY"
fi

stage "2/6 etc-prepare wikihop -> $DATA"
"$VENV_BIN/etc-prepare" wikihop --train "$TRAIN_JSON" --valid "$DEV_JSON" --out "$DATA" --overwrite \
  --pretrain-dir "$PRETRAIN_BIN" --max-long-len 4096 --max-global-len 430 --candidate-attention "$CANDIDATE_ATTENTION"

stage "3/6 fine-tune etc_tiny ($LAYERS layers) for $MAX_UPDATE updates (CPU) -> $SAVE"
VALIDATE=()
if [ "$VALID_EVERY" -gt 0 ]; then VALIDATE=(--validate-interval-updates "$VALID_EVERY" --validate-interval 100000 --save-interval 100000
  --save-interval-updates "$VALID_EVERY" --keep-interval-updates 1); fi
rm -rf "$SAVE"  # fairseq would resume from an old checkpoint_last.pt instead of the pre-trained model
# --required-batch-size-multiple 1:
# fairseq otherwise drops a final batch smaller than 8 examples (also in fairseq-validate).
"$VENV_BIN/fairseq-train" "$DATA" --user-dir user_dir --task etc_wikihop --criterion etc_wikihop \
  --arch etc_tiny --encoder-layers "$LAYERS" --finetune-from-model "$PRETRAINED" "${VALIDATE[@]}" \
  --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 \
  --optimizer adam --adam-betas '(0.9,0.98)' --weight-decay 0.01 --clip-norm 1.0 \
  --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --max-update "$MAX_UPDATE" \
  --best-checkpoint-metric accuracy --maximize-best-checkpoint-metric --no-epoch-checkpoints \
  --log-format simple --log-interval 25 --num-workers 0 --cpu --seed "$SEED" --save-dir "$SAVE"

stage "4/6 fairseq-validate $SAVE/checkpoint_best.pt"
"$VENV_BIN/fairseq-validate" "$DATA" --user-dir user_dir --task etc_wikihop --criterion etc_wikihop \
  --path "$SAVE/checkpoint_best.pt" --valid-subset valid --batch-size "$BATCH_SIZE" \
  --required-batch-size-multiple 1 --num-workers 0 --cpu

stage "5/6 etc-predict wikihop -> $RUN_DIR/dev_predictions.json"
"$VENV_BIN/etc-predict" wikihop --path "$SAVE/checkpoint_best.pt" --data "$DATA" --split valid \
  --output "$RUN_DIR/dev_predictions.json" --device cpu

stage "6/6 etc-evaluate wikihop"
"$VENV_BIN/etc-evaluate" wikihop --predictions "$RUN_DIR/dev_predictions.json" --gold "$DEV_JSON"

stage "done"
