"""Make the model the induction_head exercise ships (scratchformer/exercises/data/induction/).

Usage::

    python scripts/make_induction_exercise.py [OUT_DIR]

Trains the `--task induction` model with 2 heads a layer (2 attention-only layers, 64 wide) 700
steps on 4,000 training sequences with the default seed (about 90 s on a busy core), and writes
OUT_DIR/model.safetensors (the weights) and OUT_DIR/config.json (the model's GPTConfig and the
task's data spec), by default into the package. Same seed, same bytes: a rerun on the same
NumPy gives the file that is shipped. Prints each head's prefix-matching score and the rise of
the repeated half's loss when it is zeroed.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from scratchformer.exercises import induction
from scratchformer.runfiles import write_atomic
from scratchformer.training.jobs import build_job
from scratchformer.training.trainer import train

STEPS = 700
# Two heads a layer, not the task's default one: the learner chooses among heads, and the other
# head of the later layer must do too little for a wrong answer to pass.
MODEL = dict(n_head=2)


def main(out: Path) -> None:
    job, cfg = build_job(
        "induction",
        model=MODEL,
        train=dict(max_steps=STEPS, diag_interval=STEPS, eval_interval=STEPS, workers=1, num_samples=0),
        data=dict(n_train=4000, n_test=64),
    )
    with tempfile.TemporaryDirectory() as tmp:
        train(job, cfg, Path(tmp) / "run", progress=False, verbose=False)
        last = Path(tmp) / "run" / "last"
        config = json.loads((last / "config.json").read_text(encoding="utf-8"))
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(last / "model.safetensors", out / "model.safetensors")
    write_atomic(
        out / "config.json",
        (json.dumps({"model": config["model"], "data": config["data"]}, indent=1)).encode("utf-8"),
    )
    model, data = induction.load_model() if out == induction.MODEL_DIR else (None, None)
    if model is not None:
        tokens = induction.probe_tokens(data)
        print("zeroing each head raises the repeated half's loss by (layer x head):")
        print(induction.ablations(model, tokens, data["repeats"]).round(3))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else induction.MODEL_DIR)
