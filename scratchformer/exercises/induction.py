"""Grading the find-the-induction-head exercise (`solutions/induction_head.py`) by ablation.

The model is shipped in `data/induction/` (160 KB: model.safetensors, the weights, and
config.json, its GPTConfig and the induction task's data spec): the default `--task induction`
run (2 attention-only layers of 2 heads, 64 wide) trained 700 steps on 4,000 sequences with
the default seed; `scripts/make_induction_exercise.py` makes it again. The grader loads it,
takes the first PROBE test sequences of its task (data/induction.py, the run's seed), and
zeroes each head's output in turn (lens.run_with_hooks on `blocks.L.attn.head_out`): the rise
of the loss on the repeated targets is what the head does for induction. The learner's
`find_induction_head(model, tokens)` must answer a head whose ablation raises that loss by at
least MOST of what the best head's does, among the heads of the layers after the first: a
first-layer head reads only the tokens and their positions (an induction head needs what an
earlier head wrote, the previous token), and zeroing the previous-token head the induction
head reads raises the loss most of all (3x the induction head's on this model), so it is
refused with that cause. It is asked twice: of the model, and of the same model with the
heads of every layer given in another order (the same function, the rows of W_q,
W_k, W_v and the columns of W_O permuted), so an answer written in, not found, fails one.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from scratchformer.exercises.catalogue import Verdict

MODEL_DIR = Path(__file__).resolve().parent / "data" / "induction"
PROBE = 64  # held-out sequences the ablations are measured on
MOST = 0.75  # the answered head's ablation must raise the repeated loss by this share of the best head's
UNKNOWN = (
    "look at each head's attention pattern (lens.run_with_cache, 'blocks.L.attn.pattern') on the "
    "second copy: where does an induction head look?"
)


def load_model():
    """The shipped induction model (a GPT) and its task's data spec."""
    from scratchformer.interop.hf_files import read_safetensors
    from scratchformer.models import GPT, GPTConfig

    spec = json.loads((MODEL_DIR / "config.json").read_text(encoding="utf-8"))
    model = GPT(GPTConfig.from_dict(spec["model"]))
    model.load_state_dict(read_safetensors(MODEL_DIR / "model.safetensors"))
    return model.eval(), spec["data"]


def probe_tokens(data: dict, n: int = PROBE) -> np.ndarray:
    """(n, block_size) held-out sequences of the task: a random segment, then the same again."""
    from scratchformer.data.induction import make_induction_split

    _, held = make_induction_split(
        data["n_train"],
        2 * data["n_test"],
        data["symbols"],
        data["block_size"],
        data["repeats"],
        data["seed"],
    )
    return held[:n]


def repeat_loss(model, tokens: np.ndarray, repeats: int, zero: tuple[int, int] | None = None) -> float:
    """Mean loss on the repeated targets (data/induction.py `target_masks`), with head
    `zero` = (layer, head) zeroed."""
    from scratchformer import lens
    from scratchformer.data.induction import inputs_targets, target_masks
    from scratchformer.training.induction import token_losses

    x, y = inputs_targets(tokens)
    _, rep = target_masks(x, repeats)
    hooks = {}
    if zero is not None:

        def zeroed(out, _name):
            out = out.copy()
            out[:, zero[1]] = 0.0
            return out

        hooks = {f"blocks.{zero[0]}.attn.head_out": zeroed}
    out = lens.run_with_hooks(model, x, hooks=hooks)
    return float(token_losses(out[0] if isinstance(out, tuple) else out, y)[rep].mean())


def ablations(model, tokens: np.ndarray, repeats: int) -> np.ndarray:
    """(n_layer, n_head): the rise of the repeated targets' loss when each head is zeroed."""
    c = model.config
    base = repeat_loss(model, tokens, repeats)
    return np.array(
        [
            [repeat_loss(model, tokens, repeats, (layer, head)) - base for head in range(c.n_head)]
            for layer in range(c.n_layer)
        ]
    )


def permuted_heads(model, order: list[int]):
    """A copy of `model` that computes the same function with the heads of every layer in
    `order` (new head i is old head order[i])."""
    import copy

    m = copy.deepcopy(model)
    hs = m.config.n_embd // m.config.n_head
    rows = np.concatenate([np.arange(o * hs, (o + 1) * hs) for o in order])
    for block in m.h:
        att = block.self_attn
        C = att.n_embd
        idx = np.concatenate([rows, C + rows, 2 * C + rows])  # W_q, W_k, W_v stacked
        att.in_proj_weight.data = att.in_proj_weight.data[idx].copy()
        if att.in_proj_bias is not None:
            att.in_proj_bias.data = att.in_proj_bias.data[idx].copy()
        att.out_proj.weight.data = att.out_proj.weight.data[:, rows].copy()
    return m


def _answer(find, model, tokens, what: str):
    """The learner's (layer, head), or the Verdict that says why it is none."""
    got = find(model, tokens.copy())
    c = model.config
    if isinstance(got, np.ndarray):
        got = tuple(got.tolist())
    ok = (
        isinstance(got, (tuple, list))
        and len(got) == 2
        and all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in got)
    )
    if not ok:
        return Verdict(
            False, f"{what}: find_induction_head returned {got!r}; it must return (layer, head), two ints"
        )
    layer, head = (int(i) for i in got)
    if not (0 <= layer < c.n_layer and 0 <= head < c.n_head):
        return Verdict(
            False, f"{what}: ({layer}, {head}) is no head: layers 0..{c.n_layer - 1}, heads 0..{c.n_head - 1}"
        )
    return layer, head


@functools.lru_cache(maxsize=1)
def _prepared() -> tuple[np.ndarray, int, list[tuple[str, object, np.ndarray]]]:
    """The probe tokens, the repeat count and, for the model and its head-reordered copy, the
    ablation table (computed once per process)."""
    model, data = load_model()
    tokens = probe_tokens(data)
    order = list(range(model.config.n_head))[::-1]
    reordered = permuted_heads(model, order)
    # what the learner's process builds again from these recipes (it is sent no model: isolation.py)
    model.child_rebuild = ("induction_model", list(range(model.config.n_head)))
    reordered.child_rebuild = ("induction_model", order)
    models = (("the model", model), ("the model with its heads reordered", reordered))
    return tokens, data["repeats"], [(what, m, ablations(m, tokens, data["repeats"])) for what, m in models]


def prepare() -> None:
    """Compute the ablations before the child that grades starts (it inherits them, as the
    backward exercises' finite differences)."""
    _prepared()


def grade(find_induction_head, progress) -> Verdict:
    import copy

    progress("the ablations of the model")
    tokens, _, cases = _prepared()
    shown, answers = [], []
    for what, m, table in cases:
        later = table[1:]
        best = np.unravel_index(int(np.argmax(later)), later.shape)
        best = (int(best[0]) + 1, int(best[1]))
        progress(f"your find_induction_head on {what}")
        got = _answer(find_induction_head, copy.deepcopy(m), tokens, what)  # a copy: the learner's to change
        if isinstance(got, Verdict):
            return got
        answers.append(got)
        rise, top = table[got], table[best]
        if got[0] == 0:
            return Verdict(
                False,
                f"{what}: head {got} is in the first layer, which reads only the tokens and "
                "their positions: an induction head needs an earlier head's output (zeroing it "
                f"raises the repeated half's loss by {rise:.3f}, head {best} of a later layer by "
                f"{top:.3f})",
                _cause(m, tokens, got, table),
            )
        if rise < MOST * top:
            return Verdict(
                False,
                f"{what}: zeroing head {got} raises the repeated half's loss by {rise:.3f}; "
                f"zeroing head {best} raises it by {top:.3f} "
                f"(at least {MOST:.0%} of that is needed)",
                FIXED if answers == [got, got] else _cause(m, tokens, got, table),
            )
        shown.append(f"head {got} of {what} (+{rise:.3f}, the best +{top:.3f})")
    return Verdict(
        True,
        f"zeroing {' and '.join(shown)} brings back most of the repeated half's loss "
        f"(on {len(tokens)} held-out sequences)",
    )


FIXED = (
    "the same (layer, head) for the model and for it with its heads reordered: an answer written in, not "
    "found from what the heads do"
)


def _cause(model, tokens, got: tuple[int, int], table: np.ndarray) -> str | None:
    """A previous-token head named for the induction head; a fixed answer."""
    from scratchformer import lens

    scores = lens.head_scores(model, (tokens[:, :-1],)).scores
    if scores["previous"][got] > 0.5:
        return (
            f"head {got} attends to the previous token (score {scores['previous'][got]:.2f}): it is the "
            "previous-token head the induction head reads, in an earlier layer; an induction head attends "
            "to the token AFTER the earlier occurrence of the current token"
        )
    return None
