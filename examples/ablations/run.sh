#!/usr/bin/env bash
# Issue 21's ablations: does ETC's structure help, measured? Every arm of an ablation gets the same budget and
# the same seeds; examples/ablations/collect.py gathers the logs into results.json (per arm: every seed, mean,
# sample standard deviation, the learning curve) and results.png (learning curves + ablation bars).
#
# Run from the repository root after `scripts/setup.sh`:
#   JOBS=2 OMP_NUM_THREADS=1 bash examples/ablations/run.sh --quick   # every ablation, tiny budget, numbers
#                                                            # meaningless: 231-639 s measured on the shared 2-core machine
#   JOBS=2 OMP_NUM_THREADS=1 bash examples/ablations/run.sh  # full budget: the measured duration is in README.md
#   ABLATIONS="structure length" bash examples/ablations/run.sh   # a subset
#
# Ablations (ABLATIONS, default all of them, in this order):
#   structure      fine-tune on nextsent (CONSTRUCTED, real Wikipedia text) at long length LONG: ETC with sentence
#                  global tokens and structure labels (structure; every ETC fine-tuning arm uses hard g2l, the
#                  paper's default, unless named otherwise) vs the same global tokens without hierarchy (flat)
#                  vs only a CLS global token = local attention only (noglobals) vs fairseq RoBERTa of the same
#                  size reading the first 512 long tokens (roberta512, pretrained with masked_lm, same budget)
#   length         the structure arm at long length 512 vs LONG vs 2048 (EXTRA_LENGTHS; data prepared at each length)
#   cpc            the structure arm fine-tuned from a model pretrained with CPC + MLM vs MLM only (--cpc-weight 0,
#                  same MLM updates and masking)
#   g2l            the structure arm (--hard-g2l: a global token sees only the long tokens it summarises, the
#                  paper's default) vs nohardg2l: pretrained (same budget) and fine-tuned with soft g2l (every
#                  long token, told apart by relative labels only)
#   lift           ETC pretraining (MLM + CPC, LIFT_UPDATES) from etc-lift of the pretrained RoBERTa vs from
#                  scratch, held-out MLM loss (examples/lifting's comparison)
#   extrapolation  the CPC + MLM model pretrained at long length 512: held-out MLM loss at 512, 2048 and 8192
#                  (relative positions only; validated with 3 masking seeds)
# Shared starting points (made once, reused): the pretraining data (real Wikipedia sample, sentencepiece
# VOCAB, 6 held-out documents) and the models pretrained on it for PRE_UPDATES updates at long length 512:
# etc_tiny with CPC + MLM and etc_tiny MLM only (both with hard g2l), RoBERTa (etc_tiny's sizes). Every fine-tuning starts from one of
# them; SEEDS vary the fine-tuning (and the lift arms' continued pretraining), not the pretraining.
#
# Outputs (git-ignored) under $RUN_DIR: pre/ (data and pretrained models), data-<layout>-<len>/ (nextsent),
# ft/<arm>-<seed>.log (fairseq-train logs with held-out validation every VALID_EVERY updates), lift/,
# extrapolation/, results.json, results.png, results.md (the README table). A step whose log ends with fairseq's "done training" (or whose
# output exists) is skipped, so an interrupted run resumes where it stopped; delete a log to redo that step.
#
# Knobs (environment variables): ABLATIONS, RUN_DIR [runs/ablations], ETC_VENV [.venv], SEEDS [1 2 3],
# TRAIN [5000], VALID [300] (nextsent records), NEXTSENT_SHAPE [--distractors 3 --distractor-paragraphs 1
# --same-article 1] (etc-prepare nextsent's record shape), UPDATES [400] (fine-tuning), VALID_EVERY [100], LR [2e-3],
# BATCH [8], LONG [1024], EXTRA_LENGTHS [512 2048] (the length ablation), STRUCTURE_ARMS [flat noglobals
# roberta512] (the structure ablation's arms besides structure; empty: structure alone), PRE_UPDATES [540], LIFT_UPDATES [150],
# VOCAB [4000], LAYERS [2] (layers of every model: etc_tiny's and the RoBERTa's; etc_tiny's widths are kept),
# ETC_FLAGS [] (extra model flags of every ETC pretraining and fine-tuning, e.g. "--attention-dropout 0"), JOBS [1] (fine-tuning and pretraining runs of the ablations at once: with JOBS > 1 set
# OMP_NUM_THREADS so that JOBS x threads <= cores).
set -euo pipefail

QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    *) echo "usage: [ABLATIONS=\"structure length cpc g2l lift extrapolation\"] $0 [--quick]" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/../common.sh" etc-prepare fairseq-train fairseq-validate etc-lift
RUN_DIR=${RUN_DIR:-runs/ablations}
ALL="structure length cpc g2l lift extrapolation"
ABLATIONS=${ABLATIONS:-$ALL}
if [ "$QUICK" = 1 ]; then
  RUN_DIR=${RUN_DIR}-quick
  SEEDS=${SEEDS:-"1 2"}; TRAIN=${TRAIN:-24}; VALID=${VALID:-16}; UPDATES=${UPDATES:-4}; VALID_EVERY=${VALID_EVERY:-2}
  PRE_UPDATES=${PRE_UPDATES:-10}; LIFT_UPDATES=${LIFT_UPDATES:-4}; VOCAB=${VOCAB:-1000}
  EXTRA_LENGTHS=${EXTRA_LENGTHS:-"512 1024"}; EXTRAP_LENGTHS=${EXTRAP_LENGTHS:-"512 1024"}; LONG=${LONG:-768}
else
  SEEDS=${SEEDS:-"1 2 3"}; TRAIN=${TRAIN:-5000}; VALID=${VALID:-300}; UPDATES=${UPDATES:-400}; VALID_EVERY=${VALID_EVERY:-100}
  PRE_UPDATES=${PRE_UPDATES:-540}; LIFT_UPDATES=${LIFT_UPDATES:-150}; VOCAB=${VOCAB:-4000}
  EXTRA_LENGTHS=${EXTRA_LENGTHS:-"512 2048"}; EXTRAP_LENGTHS=${EXTRAP_LENGTHS:-"512 2048 8192"}; LONG=${LONG:-1024}
fi
LR=${LR:-2e-3}
# records of about 720 pieces (sentencepiece 4000; 91 % longer than 512, the answer ~350 pieces after the
# question, far beyond etc_tiny's 2 layers x radius 16): they fit long length 1024 (1-2 % lose the answer to
# truncation), half the long tokens of etc-prepare's default 4 x 2 distractor paragraphs (1,456 at 2048)
NEXTSENT_SHAPE=${NEXTSENT_SHAPE:-"--distractors 3 --distractor-paragraphs 1 --same-article 1"}
BATCH=${BATCH:-8}
LAYERS=${LAYERS:-2}
JOBS=${JOBS:-1}
STRUCTURE_ARMS=${STRUCTURE_ARMS-"flat noglobals roberta512"}   # set and empty: structure alone
for a in $STRUCTURE_ARMS; do
  case " flat noglobals roberta512 " in *" $a "*) ;; *) echo "error: unknown STRUCTURE_ARMS arm '$a' (known: flat noglobals roberta512)" >&2; exit 2 ;; esac
done
for a in $ABLATIONS; do
  case " $ALL " in *" $a "*) ;; *) echo "error: unknown ablation '$a' (known: $ALL)" >&2; exit 2 ;; esac
done
has() { case " $ABLATIONS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
arm() { case " $STRUCTURE_ARMS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }   # an arm of `structure` besides itself

mkdir -p "$RUN_DIR/ft" "$RUN_DIR/pre"
done_log() { [ -f "$1" ] && grep -q "done training" "$1"; }   # a finished fairseq-train log
# run "$@" in the background once fewer than JOBS runs are going (in the foreground when JOBS is 1); a failed
# run leaves a log without validation line, which collect.py names
spawn() {
  if [ "$JOBS" -le 1 ]; then "$@"; return; fi
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 2; done
  "$@" &
}

PRE=$RUN_DIR/pre
# the optimizer of examples/pretraining/run.sh
PRE_OPTIM=(--optimizer adam --adam-betas '(0.9,0.98)' --weight-decay 0.01 --clip-norm 1.0
           --lr-scheduler inverse_sqrt --warmup-updates 50 --disable-validation --no-epoch-checkpoints
           --log-format simple --log-interval 50 --num-workers 0 --cpu)
ETC_ARCH=(--arch etc_tiny --encoder-layers "$LAYERS" ${ETC_FLAGS:-})
PRE_ETC=(--user-dir user_dir --task etc_pretraining --criterion cpc_mlm "${ETC_ARCH[@]}"
         --max-long-len 512 --max-global-len 64 --batch-size 8 --required-batch-size-multiple 1)
TINY_ROBERTA=(--encoder-layers "$LAYERS" --encoder-embed-dim 64 --encoder-ffn-embed-dim 256 --encoder-attention-heads 4)

pretrain_data() {
  if [ ! -f "$PRE/data/prepare.json" ]; then
    stage "pretraining data: Wikipedia sample, sentencepiece $VOCAB, 6 held-out documents -> $PRE/data"
    "$VENV_BIN/etc-prepare" pretrain --wikipedia-sample --out "$PRE/data" --overwrite --vocab-size "$VOCAB" --valid-docs 6 --seed 1
  fi
}
pretrain_etc() {  # NAME CPC_WEIGHT [G2L_FLAG]: etc_tiny, MLM (+ CPC), PRE_UPDATES at long length 512, seed 1,
  # hard g2l unless G2L_FLAG is given empty (as the paper's checkpoints: with soft g2l every sentence token reads
  # the whole input at first, and CPC stays at chance for hundreds of updates; README.md, "What the sentence
  # tokens see"). A fine-tuning run takes the model fields it is not given from its starting checkpoint (so a
  # soft-g2l fine-tuning of a hard-g2l checkpoint needs --no-hard-g2l); the g2l arm is soft in both stages.
  local g2l=${3---hard-g2l}
  pretrain_data
  if ! done_log "$PRE/$1.log"; then
    stage "pretrain etc_tiny ($1, --cpc-weight $2 ${g2l:-soft g2l}), $PRE_UPDATES updates -> $PRE/$1"
    "$VENV_BIN/fairseq-train" "$PRE/data/bin" "${PRE_ETC[@]}" "${PRE_OPTIM[@]}" --cpc-weight "$2" --lr 2e-3 \
      --max-update "$PRE_UPDATES" --seed 1 $g2l --save-dir "$PRE/$1" > "$PRE/$1.log" 2>&1
  fi
}
pretrain_roberta() {  # fairseq RoBERTa of etc_tiny's sizes, masked_lm, the same data, updates and optimizer
  pretrain_data
  if ! done_log "$PRE/roberta.log"; then
    stage "pretrain RoBERTa (2 x 64, masked_lm, 512 tokens), $PRE_UPDATES updates -> $PRE/roberta"
    "$VENV_BIN/fairseq-train" "$PRE/data/bin" --task masked_lm --criterion masked_lm --arch roberta_base "${TINY_ROBERTA[@]}" \
      --max-positions 512 --tokens-per-sample 512 --sample-break-mode complete --batch-size 8 \
      "${PRE_OPTIM[@]}" --lr 2e-3 --max-update "$PRE_UPDATES" --seed 1 --save-dir "$PRE/roberta" > "$PRE/roberta.log" 2>&1
  fi
  if [ ! -f "$PRE/roberta_window.pt" ]; then
    "$VENV_BIN/python" -m etc_fairseq.finetune.common.roberta_window "$PRE/roberta/checkpoint_last.pt" --out "$PRE/roberta_window.pt"
  fi
}

nextsent_data() {  # LAYOUT LEN -> prints the directory
  local layout=$1 len=$2 flag="" out="$RUN_DIR/data-$1-$2"
  case "$layout" in structure) ;; flat) flag=--flat-structure ;; noglobals) flag=--no-globals ;; esac
  if [ ! -f "$out/prepare.json" ]; then
    stage "etc-prepare nextsent ($layout, long $len, $TRAIN / $VALID records) -> $out" >&2
    "$VENV_BIN/etc-prepare" nextsent --wikipedia-sample --train "$TRAIN" --valid "$VALID" --seed 1 $NEXTSENT_SHAPE \
      --max-long-len "$len" --max-global-len $(( len / 8 )) $flag --pretrain-dir "$PRE/data/bin" \
      --out "$out" --overwrite >&2
  fi
  echo "$out"
}
finetune() {  # ARM SEED DATA LEN INIT [extra fairseq-train flags...]: one fine-tuning run -> ft/ARM-SEED.log
  local arm=$1 seed=$2 data=$3 len=$4 init=$5; shift 5
  local log="$RUN_DIR/ft/$arm-$seed.log"
  if done_log "$log"; then return; fi
  stage "fine-tune $arm, seed $seed, long $len, $UPDATES updates (held-out validation every $VALID_EVERY)"
  "$VENV_BIN/fairseq-train" "$data" --user-dir user_dir --task etc_nextsent --criterion etc_nextsent \
    --max-long-len "$len" --max-global-len $(( len / 8 )) --finetune-from-model "$init" \
    --batch-size "$BATCH" --required-batch-size-multiple 1 --optimizer adam --adam-betas '(0.9,0.98)' --clip-norm 1.0 \
    --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates $(( UPDATES / 10 + 1 )) --max-update "$UPDATES" \
    --validate-interval-updates "$VALID_EVERY" --validate-interval 100000 --save-interval 100000 --no-epoch-checkpoints --no-save-optimizer-state \
    --seed "$seed" --cpu --num-workers 0 --log-format simple --log-interval 10 \
    --save-dir "$RUN_DIR/ft/$arm-$seed" "$@" > "$log" 2>&1 || { echo "error: fine-tuning $arm seed $seed failed, see $log" >&2; exit 1; }
  grep "valid on 'valid'" "$log" | tail -1
}

lift_arm() {  # lifted|scratch SEED: ETC pretraining (MLM + CPC) for LIFT_UPDATES, then its held-out MLM loss
  local arm=$1 seed=$2 log=$RUN_DIR/lift/$1-$2.log vlog=$RUN_DIR/lift/$1-$2.valid.log init=()
  [ "$arm" = lifted ] && init=(--finetune-from-model "$RUN_DIR/lift/etc_tiny_lifted.pt")
  if ! done_log "$log"; then
    stage "ETC pretraining $arm, seed $seed, $LIFT_UPDATES updates"
    "$VENV_BIN/fairseq-train" "$PRE/data/bin" "${PRE_ETC[@]}" "${PRE_OPTIM[@]}" --lr 2e-3 --max-update "$LIFT_UPDATES" \
      --seed "$seed" "${init[@]}" --save-dir "$RUN_DIR/lift/$arm-$seed" > "$log" 2>&1 || { echo "error: see $log" >&2; return 1; }
  fi
  if ! grep -q "valid on 'valid'" "$vlog" 2>/dev/null; then
    "$VENV_BIN/fairseq-validate" "$PRE/data/bin" --user-dir user_dir --task etc_pretraining \
      --path "$RUN_DIR/lift/$arm-$seed/checkpoint_last.pt" --batch-size 8 --required-batch-size-multiple 1 \
      --max-long-len 512 --max-global-len 64 --num-workers 0 --cpu > "$vlog" 2>&1 || { echo "error: see $vlog" >&2; return 1; }
  fi
  echo "lift $arm seed $seed: $(grep "valid on 'valid'" "$vlog" | tail -1 | grep -oE "mlm_loss [0-9.]+")"
}
extrapolate() {  # LEN SEED: held-out MLM of the CPC + MLM model pretrained at 512, at long length LEN
  local len=$1 seed=$2 vlog=$RUN_DIR/extrapolation/long$1-$2.log
  if ! grep -q "valid on 'valid'" "$vlog" 2>/dev/null; then
    stage "held-out MLM of the model pretrained at 512, at long length $len, masking seed $seed"
    # one global token per sentence: about 30 word pieces per sentence, so len / 8 is ample
    "$VENV_BIN/fairseq-validate" "$PRE/data/bin" --user-dir user_dir --task etc_pretraining \
      --path "$CPC" --max-long-len "$len" --max-global-len $(( len / 8 )) --batch-size 1 --required-batch-size-multiple 1 \
      --seed "$seed" --num-workers 0 --cpu > "$vlog" 2>&1 || { echo "error: see $vlog" >&2; return 1; }
  fi
  echo "long $len seed $seed: $(grep "valid on 'valid'" "$vlog" | tail -1 | grep -oE "mlm_loss [0-9.]+")"
}

CPC=$PRE/cpc/checkpoint_last.pt
if has structure || has length || has cpc || has g2l || has extrapolation; then pretrain_etc cpc 0.2; fi

if has g2l; then pretrain_etc cpc_soft_g2l 0.2 ""; fi
if has structure || has length || has cpc || has g2l; then D=$(nextsent_data structure "$LONG"); fi
if has structure; then
  if arm roberta512; then pretrain_roberta; fi
  if arm flat; then DF=$(nextsent_data flat "$LONG"); fi
  if arm noglobals; then DN=$(nextsent_data noglobals "$LONG"); fi
fi
for seed in $SEEDS; do   # seed by seed, so that a run cut short has every arm of the first seeds
  if has structure || has length || has cpc || has g2l; then spawn finetune structure "$seed" "$D" "$LONG" "$CPC" "${ETC_ARCH[@]}" --hard-g2l; fi
  if has structure; then
    if arm flat; then spawn finetune flat "$seed" "$DF" "$LONG" "$CPC" "${ETC_ARCH[@]}" --hard-g2l; fi
    if arm noglobals; then spawn finetune noglobals "$seed" "$DN" "$LONG" "$CPC" "${ETC_ARCH[@]}" --hard-g2l; fi
    # the same long input as `structure` (its global tokens ignored), cropped to the first 512 tokens
    if arm roberta512; then spawn finetune roberta512 "$seed" "$D" "$LONG" "$PRE/roberta_window.pt" --arch roberta_window "${TINY_ROBERTA[@]}" --max-positions 512; fi
  fi
  if has g2l; then spawn finetune nohardg2l "$seed" "$D" "$LONG" "$PRE/cpc_soft_g2l/checkpoint_last.pt" "${ETC_ARCH[@]}"; fi
done
if has cpc; then
  pretrain_etc nocpc 0
  for seed in $SEEDS; do spawn finetune nocpc "$seed" "$D" "$LONG" "$PRE/nocpc/checkpoint_last.pt" "${ETC_ARCH[@]}" --hard-g2l; done
fi
if has length; then
  for len in $EXTRA_LENGTHS; do
    DL=$(nextsent_data structure "$len")
    for seed in $SEEDS; do spawn finetune "long$len" "$seed" "$DL" "$len" "$CPC" "${ETC_ARCH[@]}" --hard-g2l; done
  done
fi
if has lift; then
  pretrain_roberta
  mkdir -p "$RUN_DIR/lift"
  if [ ! -f "$RUN_DIR/lift/etc_tiny_lifted.pt" ]; then
    "$VENV_BIN/etc-lift" "$PRE/roberta/checkpoint_last.pt" "${ETC_ARCH[@]}" --dict "$PRE/data/bin/dict.txt" \
      --out "$RUN_DIR/lift/etc_tiny_lifted.pt" --overwrite
  fi
  for seed in $SEEDS; do for arm in lifted scratch; do spawn lift_arm "$arm" "$seed"; done; done
fi
if has extrapolation; then
  mkdir -p "$RUN_DIR/extrapolation"
  for len in $EXTRAP_LENGTHS; do for seed in $SEEDS; do spawn extrapolate "$len" "$seed"; done; done
fi
wait
stage "results -> $RUN_DIR/results.json, $RUN_DIR/results.png, $RUN_DIR/results.md"
"$VENV_BIN/python" examples/ablations/collect.py --run-dir "$RUN_DIR" --ablations $ABLATIONS --seeds $SEEDS \
  --arms structure $STRUCTURE_ARMS nocpc nohardg2l \
  --long "$LONG" --extra-lengths $EXTRA_LENGTHS --extrapolation-lengths $EXTRAP_LENGTHS \
  --out "$RUN_DIR/results.json" --png "$RUN_DIR/results.png" --markdown "$RUN_DIR/results.md"
stage "done"
