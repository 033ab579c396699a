#!/usr/bin/env bash
# The fast preset's table in docs/results.md: its documented command, seeds 1-5 (or those given),
# one run at a time (the machine is shared), each timed into OUT/fast-sS.time as "user sys wall"
# seconds (the worker process included: it is joined before the command ends), the CPU's name into
# OUT/cpu.txt. Usage: bash scripts/grokking_runs.sh OUT [SEED ...]
# then: python scripts/grokking_table.py OUT/fast-s*
set -u
OUT=${1:?usage: scripts/grokking_runs.sh OUT [SEED ...]}
shift
SEEDS=${*:-1 2 3 4 5}
mkdir -p "$OUT"
lscpu | grep 'Model name' > "$OUT/cpu.txt"
for s in $SEEDS; do
  /usr/bin/time -f "%U %S %e" -o "$OUT/fast-s$s.time" \
    python -m scratchformer train --task modadd --preset fast --seed "$s" --out "$OUT/fast-s$s" \
    > "$OUT/fast-s$s.log" 2>&1
done
