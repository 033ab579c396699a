#!/usr/bin/env bash
# Olsson et al. 2022's in-context learning score on tinyshakespeare, measured as the model trains
# (docs/results.md, "In-context learning on tinyshakespeare"): a 2-layer attention-only model with a
# 512-token context is trained in stages, one command, and after each stage scripts/icl_score.py
# measures its last/ checkpoint (the loss on token 500 minus the loss on token 50, over windows of
# the validation split; each head's prefix-matching score). The cosine is planned for the last
# stage (--decay-steps), so the staged run takes the steps of one uninterrupted run.
# TOKENIZER=bpe (the default: a byte-level BPE of 1,024 ids trained on the training split) or char.
# Each stage is timed into OUT/stage-STEP.time as "user sys wall" seconds (training only, the
# worker process included), the CPU's name goes into OUT/cpu.txt, the scores into OUT/icl.txt.
# Usage: [TOKENIZER=char] bash scripts/icl_shakespeare.sh OUT [STEP ...]
#        (default steps: 100 200 400 800 1600)
set -eu
OUT=${1:?usage: [TOKENIZER=char] bash scripts/icl_shakespeare.sh OUT [STEP ...]}
shift
STEPS=${*:-100 200 400 800 1600}
LAST=${STEPS##* }
case ${TOKENIZER:-bpe} in
  bpe) TOKENS="--tokenizer bpe --vocab-size 1024" ;;
  char) TOKENS="--tokenizer char" ;;
  *) echo "TOKENIZER must be bpe or char, got '$TOKENIZER'" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
lscpu | grep 'Model name' > "$OUT/cpu.txt"
: > "$OUT/icl.txt"
# PyTorch's init and an untied head, as the induction task's model (with GPT-2's init and a tied
# head that task formed no heads in 2,000 steps: docs/results.md); rotary positions, so that a
# head can attend to the previous token at every one of the 512 positions without learning each
MODEL="--data shakespeare --format text $TOKENS --block-size 512 --n-layer 2 --n-head 4 --n-embd 64"
MODEL="$MODEL --attn-only --positional rope --init pytorch --no-tie-weights"
TRAIN="--batch-size 8 --lr 3e-3 --min-lr 3e-4 --warmup-steps 25 --decay-steps $LAST --eval-interval 100000"
TRAIN="$TRAIN --eval-batches 8 --num-samples 0 --diag-interval 0"
first=1
for step in $STEPS; do
  if [ $first = 1 ]; then
    args="$MODEL $TRAIN --overwrite"
    first=0
  else
    args="--resume"
  fi
  # shellcheck disable=SC2086  # the options are words
  /usr/bin/time -f "%U %S %e" -o "$OUT/stage-$step.time" \
    python -m scratchformer train $args --no-progress --max-steps "$step" --out "$OUT/run" >> "$OUT/train.log" 2>&1
  python scripts/icl_score.py "$OUT/run/last" | tee -a "$OUT/icl.txt"
done
