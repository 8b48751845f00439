# Sourced by every examples/*/run.sh (`source "$(dirname "$0")/../common.sh" TOOL...`): runs the recipe from the
# repository root (relative paths such as RUN_DIR are taken from there), with the set-up's tools.
#   VENV_BIN            the set-up's bin/ (ETC_VENV, as scripts/setup.sh; default .venv)
#   ETC_FAIRSEQ_CACHE   where the Wikipedia sample and other fetched files are cached (default ./.cache, as the tests)
#   stage TEXT          prints a stage header with the seconds since the recipe started
#   wikipedia_dump      prints the path of the cached Wikipedia dump sample (fetched once with pip)
# TOOL...: console scripts the recipe needs; a missing one stops it with the set-up command to run.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV_BIN=${ETC_VENV:-.venv}/bin
export ETC_FAIRSEQ_CACHE=${ETC_FAIRSEQ_CACHE:-$PWD/.cache}
for tool in python "$@"; do
  if [ ! -x "$VENV_BIN/$tool" ]; then
    echo "error: $VENV_BIN/$tool not found; run scripts/setup.sh first (or set ETC_VENV)" >&2
    exit 1
  fi
done
_recipe_start=$(date +%s)
stage() { echo; echo "=== [$(( $(date +%s) - _recipe_start ))s] $* ==="; }
wikipedia_dump() {
  "$VENV_BIN/python" -c "from etc_fairseq.prepare.sample_data import fetch_wikipedia_sample as f; print(f(None))"
}
