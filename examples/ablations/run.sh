#!/usr/bin/env bash
# Issue 21's structure ablation on the CONSTRUCTED long-range task `nextsent` (real Wikipedia text):
# ETC with sentence global tokens and structure labels (`structure`) vs the same tokens without hierarchy or
# context cut (`flat`) vs only a CLS global token, i.e. local attention only (`noglobals`), each trained from
# scratch at the same budget, one fairseq-train + fairseq-validate per variant and seed; results -> JSON.
#
# Run from the repository root after `scripts/setup.sh`:
#   bash examples/ablations/run.sh --quick     # a smoke run: minutes on 2 CPU cores, numbers meaningless
#   bash examples/ablations/run.sh             # the full budget (about 2 h of CPU): do not start it on a busy machine
#
# Outputs (git-ignored): $RUN_DIR/{tok,data-<variant>,ckpt-<variant>-<seed>}, $RUN_DIR/results.json with, per
# variant, the held-out accuracy / MRR of every seed and their mean and spread, next to the word-overlap and
# random baselines that `etc-prepare nextsent` computed on the same held-out records.
#
# Knobs (environment variables): RUN_DIR [runs/ablations], ETC_VENV [.venv], SEEDS, TRAIN, VALID, UPDATES,
# MAX_LONG [2048], VARIANTS ["structure flat noglobals"].
set -euo pipefail

QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
  esac
done
VENV_BIN=${ETC_VENV:-.venv}/bin
RUN_DIR=${RUN_DIR:-runs/ablations}
if [ "$QUICK" = 1 ]; then
  RUN_DIR=${RUN_DIR}-quick
  SEEDS=${SEEDS:-1}; TRAIN=${TRAIN:-48}; VALID=${VALID:-24}; UPDATES=${UPDATES:-12}; VOCAB=1000
else
  SEEDS=${SEEDS:-"1 2 3"}; TRAIN=${TRAIN:-2000}; VALID=${VALID:-300}; UPDATES=${UPDATES:-1500}; VOCAB=4000
fi
MAX_LONG=${MAX_LONG:-2048}
VARIANTS=${VARIANTS:-"structure flat noglobals"}
export ETC_FAIRSEQ_CACHE=${ETC_FAIRSEQ_CACHE:-$PWD/.cache}

if [ ! -x "$VENV_BIN/fairseq-train" ] || [ ! -x "$VENV_BIN/etc-prepare" ]; then
  echo "error: $VENV_BIN/fairseq-train or $VENV_BIN/etc-prepare not found; run scripts/setup.sh first" >&2
  exit 1
fi
[ -d user_dir ] || { echo "error: run this script from the repository root" >&2; exit 1; }

start=$(date +%s)
stage() { echo; echo "=== [$(( $(date +%s) - start ))s] $* ==="; }

stage "tokenizer: sentencepiece ($VOCAB) on the Wikipedia sample -> $RUN_DIR/tok"
if [ ! -f "$RUN_DIR/tok/bin/dict.txt" ]; then
  "$VENV_BIN/etc-prepare" pretrain --wikipedia-sample --out "$RUN_DIR/tok" --overwrite --vocab-size "$VOCAB" --valid-docs 2
fi

for v in $VARIANTS; do
  case "$v" in
    structure) flag="" ;;
    flat) flag="--flat-structure" ;;
    noglobals) flag="--no-globals" ;;
    *) echo "error: unknown variant $v" >&2; exit 2 ;;
  esac
  stage "etc-prepare nextsent ($v) -> $RUN_DIR/data-$v"
  "$VENV_BIN/etc-prepare" nextsent --wikipedia-sample --train "$TRAIN" --valid "$VALID" --seed 1 \
    --max-long-len "$MAX_LONG" --max-global-len 256 $flag --pretrain-dir "$RUN_DIR/tok/bin" \
    --out "$RUN_DIR/data-$v" --overwrite
  for seed in $SEEDS; do
    stage "train $v, seed $seed, $UPDATES updates"
    "$VENV_BIN/fairseq-train" "$RUN_DIR/data-$v" --user-dir user_dir --task etc_nextsent --criterion etc_nextsent \
      --arch etc_tiny --max-long-len "$MAX_LONG" --max-global-len 256 \
      --batch-size 8 --required-batch-size-multiple 1 --optimizer adam --adam-betas '(0.9,0.98)' --clip-norm 1.0 \
      --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates $(( UPDATES / 10 + 1 )) --max-update "$UPDATES" \
      --disable-validation --no-epoch-checkpoints --seed "$seed" --cpu --num-workers 0 \
      --log-format simple --log-interval 10 --save-dir "$RUN_DIR/ckpt-$v-$seed"
    stage "validate $v, seed $seed"
    "$VENV_BIN/fairseq-validate" "$RUN_DIR/data-$v" --user-dir user_dir --task etc_nextsent \
      --criterion etc_nextsent --max-long-len "$MAX_LONG" --max-global-len 256 \
      --path "$RUN_DIR/ckpt-$v-$seed/checkpoint_last.pt" --valid-subset valid --batch-size 8 \
      --cpu --num-workers 0 2>&1 | tee "$RUN_DIR/validate-$v-$seed.log"
  done
done

stage "results -> $RUN_DIR/results.json"
"$VENV_BIN/python" examples/ablations/collect.py --run-dir "$RUN_DIR" --variants $VARIANTS --seeds $SEEDS \
  --updates "$UPDATES" --out "$RUN_DIR/results.json"
stage "done"
