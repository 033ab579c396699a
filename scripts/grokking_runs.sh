#!/usr/bin/env bash
# Grokking runs side by side (docs/results.md): the paper's preset (one run, `--workers W`) and
# the fast preset's seeds, one core each. Usage: scripts/grokking_runs.sh OUT SECONDS [W]
set -u
OUT=${1:?out dir}; SECS=${2:?seconds}; W=${3:-6}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$OUT"
run() {  # name, then train options
  local name=$1; shift
  ( TIMEFORMAT="%R s wall %U s user %S s sys"
    { time python -m scratchformer.cli.main train --task modadd --no-progress --quiet --time-limit "$SECS" \
        --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1 ; } 2> "$OUT/$name.time" ) &
}
run paper-s1 --seed 1 --workers "$W"
for s in 1 2 3 4 5; do  # the fast preset (FAST_PRESET, training/modadd.py)
  run fast-s$s --seed $s --workers 1 --modulus 31 --train-fraction 0.7 --lr 3e-3 --min-lr 3e-3 --max-steps 3000 \
    --eval-interval 100 --diag-interval 25
done
wait
