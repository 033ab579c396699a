#!/usr/bin/env bash
# Olsson et al. 2022's in-context learning score on tinyshakespeare, before and after the induction
# heads form (docs/results.md, "In-context learning on tinyshakespeare"): a 2-layer attention-only
# character model with a 512-token context is trained in stages, one command, and after each stage
# scripts/icl_score.py measures its last/ checkpoint (the loss on token 500 minus the loss on token
# 50 over 64 validation windows; each head's prefix-matching score). The cosine is planned for the
# last stage (--decay-steps), so the staged run takes the same steps as one uninterrupted run.
# Each stage is timed into OUT/stage-STEP.time as "user sys wall" seconds, the CPU's name goes into
# OUT/cpu.txt, the scores into OUT/icl.txt (one line a stage).
# Usage: bash scripts/icl_shakespeare.sh OUT [STEP ...]   (default steps: 25 50 100 200 400 800 1200)
set -eu
OUT=${1:?usage: scripts/icl_shakespeare.sh OUT [STEP ...]}
shift
STEPS=${*:-25 50 100 200 400 800 1200}
LAST=${STEPS##* }
mkdir -p "$OUT"
lscpu | grep 'Model name' > "$OUT/cpu.txt"
: > "$OUT/icl.txt"
MODEL="--data shakespeare --format text --block-size 512 --n-layer 2 --n-head 4 --n-embd 64 --attn-only --positional rope --init pytorch --no-tie-weights"
TRAIN="--batch-size 8 --lr 3e-3 --min-lr 3e-4 --warmup-steps 25 --decay-steps $LAST --eval-interval 100000"
TRAIN="$TRAIN --eval-batches 8 --num-samples 0 --diag-interval 0 --no-progress"
first=1
for step in $STEPS; do
  if [ $first = 1 ]; then
    args="$MODEL $TRAIN --overwrite"
    first=0
  else
    args="--resume --no-progress"
  fi
  # shellcheck disable=SC2086  # the options are words
  /usr/bin/time -f "%U %S %e" -o "$OUT/stage-$step.time" \
    python -m scratchformer train $args --max-steps "$step" --out "$OUT/run" >> "$OUT/train.log" 2>&1
  python scripts/icl_score.py "$OUT/run/last" | tee -a "$OUT/icl.txt"
done
