#!/usr/bin/env bash
# The long quality runs behind docs/results.md: each trains with the CLI's defaults, then
# evaluates on the held-out split. Run from the repository root; about 30 minutes on 2 cores.
#   bash scripts/quality_bars.sh            # all of them
#   bash scripts/quality_bars.sh names      # one: names | llama-names | shakespeare | majority | copy | reverse | sort | minilm
set -euo pipefail
OUT=${OUT:-out/bars}
SHAKESPEARE=${SHAKESPEARE:-shakespeare}  # the bundled tinyshakespeare, or a path
which=${1:-all}

run() {  # name, then the train command's extra arguments
    local name=$1; shift
    [[ $which == all || $which == "$name" ]] || return 0
    rm -rf "$OUT/$name"
    local start=$SECONDS
    scratchformer train --out "$OUT/$name" --no-progress "$@"
    echo "== $name: trained in $((SECONDS - start)) s"
}

run names
if [[ $which == all || $which == names ]]; then
    scratchformer eval "$OUT/names" --split test --json
    python scripts/names_novelty.py "$OUT/names" --show 20 -n 1000 --seed 0
fi
run llama-names --positional rope --normalization rmsnorm --activation swiglu --no-bias  # names, Llama's blocks
[[ $which == all || $which == llama-names ]] && scratchformer eval "$OUT/llama-names" --split test --json
run shakespeare --data "$SHAKESPEARE"
if [[ $which == all || $which == shakespeare ]]; then
    scratchformer eval "$OUT/shakespeare" --split val --json
    python scripts/nanogpt_estimates.py "$OUT/shakespeare"
fi
for task in majority copy reverse sort; do
    run "$task" --task "$task"
    [[ $which == all || $which == "$task" ]] && scratchformer eval "$OUT/$task" --split test --json
done
[[ $which == all || $which == reverse ]] && scratchformer eval "$OUT/reverse" --split test --beam 4 --json
if [[ $which == all || $which == minilm ]]; then
    python scripts/check_minilm.py
fi
