#!/usr/bin/env bash
# Set up ./.venv and run the whole test suite (what CI runs).
#
# The suite runs in ETC_TEST_WORKERS pytest-xdist workers (default 2, CI's cores), each test file whole on one
# worker (--dist loadfile: a file's fixtures are built once), every process on one thread. Most of the suite's
# time is process start-up, small models and compilation, which a second thread hardly speeds up, so two
# single-threaded workers take about half the wall time of one process on two threads (484 s against 932 s
# for the whole suite on a 2-core machine). Two workers on two threads each would oversubscribe the cores
# (OpenMP spin-waiting: up to 10 times slower). ETC_TEST_WORKERS=0 runs the suite in this one process, with
# the threads torch chooses.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export ETC_FAIRSEQ_CACHE="${ETC_FAIRSEQ_CACHE:-$PWD/.cache}"
WORKERS="${ETC_TEST_WORKERS:-2}"
if [ "$WORKERS" != 0 ]; then
  export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
fi
exec .venv/bin/python -m pytest tests -q -ra --durations=15 -n "$WORKERS" --dist loadfile "$@"
