#!/usr/bin/env bash
# "Lifting helps": ETC pretraining (etc_pretraining + cpc_mlm) continued from a lifted RoBERTa against the
# same budget from scratch, both scored on held-out Wikipedia text. CPU only, a few minutes on 2 free cores.
#
# Run from the repository root after `scripts/setup.sh` (which creates ./.venv):
#   bash examples/lifting/run.sh
#
# Stages:
#   1) `etc-prepare pretrain --wikipedia-sample` (real English Wikipedia, sentencepiece 4k, one binarized
#      item per sentence; the same data as examples/pretraining; skipped when already complete)
#   2) a small fairseq RoBERTa (`--arch roberta_base` with etc_tiny's sizes: 2 layers, 64 wide, 4 heads,
#      FFN 256), `--task masked_lm` on the SAME bin/ directory: same dictionary, same train/valid split
#      (masked_lm packs whole sentences into blocks of LONG_LEN tokens)
#   3) `etc-lift` it into etc_tiny (absolute positions dropped; relative labels, global token types and
#      the CPC head start fresh)
#   4) etc_pretraining + cpc_mlm for ETC_UPDATES updates from the lifted checkpoint, and
#   5) the same command without --finetune-from-model (from scratch)
#   6) fairseq-validate of both on the held-out documents (MLM loss in bits, accuracies in percent)
# Outputs go to runs/lifting/ (git-ignored).
#
# Knobs (environment variables, defaults in brackets): ROBERTA_UPDATES [300], ETC_UPDATES [100],
# LONG_LEN [256] (RoBERTa's --tokens-per-sample and ETC's --max-long-len), BATCH_SIZE [8], LR [2e-3],
# SEED [1], RUN_DIR [runs/lifting], ETC_VENV [.venv].
set -euo pipefail

source "$(dirname "$0")/../common.sh" etc-prepare fairseq-train fairseq-validate etc-lift
RUN_DIR=${RUN_DIR:-runs/lifting}
DATA=$RUN_DIR/data
ROBERTA_UPDATES=${ROBERTA_UPDATES:-300}
ETC_UPDATES=${ETC_UPDATES:-100}
LONG_LEN=${LONG_LEN:-256}
GLOBAL_LEN=$(( LONG_LEN / 8 ))
BATCH_SIZE=${BATCH_SIZE:-8}
LR=${LR:-2e-3}
SEED=${SEED:-1}

stage "1/6 prepare sentence data -> $DATA"
if [ -f "$DATA/prepare.json" ] && [ -f "$DATA/bin/dict.txt" ]; then
  echo "already prepared ($DATA/prepare.json exists); delete $DATA to rebuild"
else
  "$VENV_BIN/etc-prepare" pretrain --wikipedia-sample --out "$DATA" --overwrite \
    --vocab-size 4000 --valid-docs 6 --seed "$SEED"
fi

# The optimizer of examples/pretraining/run.sh, for all three trainings.
OPTIM=(--optimizer adam --adam-betas '(0.9,0.98)' --weight-decay 0.01 --clip-norm 1.0
       --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates 50
       --cpu --seed "$SEED" --num-workers 0 --log-format simple --log-interval 50
       --disable-validation --no-epoch-checkpoints)

stage "2/6 RoBERTa (roberta_base, 2 layers x 64, FFN 256), masked_lm, $ROBERTA_UPDATES updates -> $RUN_DIR/roberta"
"$VENV_BIN/fairseq-train" "$DATA/bin" --task masked_lm --criterion masked_lm --arch roberta_base \
  --encoder-layers 2 --encoder-embed-dim 64 --encoder-ffn-embed-dim 256 --encoder-attention-heads 4 \
  --max-positions "$LONG_LEN" --tokens-per-sample "$LONG_LEN" --sample-break-mode complete --batch-size "$BATCH_SIZE" \
  "${OPTIM[@]}" --max-update "$ROBERTA_UPDATES" --save-dir "$RUN_DIR/roberta" 2>&1 | tee "$RUN_DIR/roberta.log"

stage "3/6 etc-lift -> $RUN_DIR/etc_tiny_lifted.pt"
"$VENV_BIN/etc-lift" "$RUN_DIR/roberta/checkpoint_last.pt" --arch etc_tiny --dict "$DATA/bin/dict.txt" \
  --out "$RUN_DIR/etc_tiny_lifted.pt" --overwrite

ETC=(--user-dir user_dir --task etc_pretraining --criterion cpc_mlm --arch etc_tiny
     --max-long-len "$LONG_LEN" --max-global-len "$GLOBAL_LEN" --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1)

stage "4/6 ETC from the lifted RoBERTa, $ETC_UPDATES updates -> $RUN_DIR/etc_lifted"
"$VENV_BIN/fairseq-train" "$DATA/bin" "${ETC[@]}" "${OPTIM[@]}" --max-update "$ETC_UPDATES" \
  --finetune-from-model "$RUN_DIR/etc_tiny_lifted.pt" --save-dir "$RUN_DIR/etc_lifted" 2>&1 | tee "$RUN_DIR/etc_lifted.log"

stage "5/6 ETC from scratch, $ETC_UPDATES updates -> $RUN_DIR/etc_scratch"
"$VENV_BIN/fairseq-train" "$DATA/bin" "${ETC[@]}" "${OPTIM[@]}" --max-update "$ETC_UPDATES" \
  --save-dir "$RUN_DIR/etc_scratch" 2>&1 | tee "$RUN_DIR/etc_scratch.log"

stage "6/6 held-out validation"
for run in etc_lifted etc_scratch; do
  "$VENV_BIN/fairseq-validate" "$DATA/bin" --user-dir user_dir --task etc_pretraining \
    --path "$RUN_DIR/$run/checkpoint_last.pt" --batch-size "$BATCH_SIZE" --required-batch-size-multiple 1 \
    --max-long-len "$LONG_LEN" --max-global-len "$GLOBAL_LEN" --num-workers 0 --cpu 2>&1 | tee "$RUN_DIR/$run.valid.log"
done

echo
echo "held-out (valid split): mlm_loss in bits per MLM target, accuracies in percent"
for run in etc_lifted etc_scratch; do
  printf '%-12s ' "$run"
  grep -o "| valid on 'valid' subset | .*" "$RUN_DIR/$run.valid.log" | tail -1 \
    | grep -oE "(mlm_loss|mlm_accuracy|cpc_loss|cpc_accuracy) [0-9.na]+" | tr '\n' ' '
  echo
done
stage "done"
