#!/usr/bin/env bash
# The examples' measured full runs (docs/course.md's "How the times were measured" table, which
# each example's header and the course's first table repeat; tests/docs/test_examples.py keeps them
# together): each example's full run (no --quick), one at a time, timed by /usr/bin/time as
# "user sys wall" seconds into OUT/NAME.time, its output into OUT/NAME.log, the CPU's name into
# OUT/cpu.txt; then the table's rows, CPU = user + sys. Run it on a quiet machine.
# Usage: bash scripts/example_times.sh OUT [NAME ...]   (default: every examples/?_*.py)
set -eu
OUT=${1:?usage: scripts/example_times.sh OUT [NAME ...]}
shift
if [ $# -gt 0 ]; then NAMES=$*; else NAMES=$(cd examples && ls ?_*.py | sed 's/\.py$//'); fi
mkdir -p "$OUT"
lscpu | grep 'Model name' > "$OUT/cpu.txt"
for name in $NAMES; do
  /usr/bin/time -f "%U %S %e" -o "$OUT/$name.time" \
    python "examples/$name.py" --out "$OUT/$name" > "$OUT/$name.log" 2>&1
done
echo "| example | CPU (user + sys) | wall |"
echo "| --- | --- | --- |"
for name in $NAMES; do
  read -r user sys wall < "$OUT/$name.time"
  printf '| `python examples/%s.py` | %s s | %s s |\n' "$name" \
    "$(python -c "print(f'{round($user + $sys):,}')")" "$(python -c "print(f'{round($wall):,}')")"
done
echo "on $(sed 's/^Model name: *//' "$OUT/cpu.txt")"
