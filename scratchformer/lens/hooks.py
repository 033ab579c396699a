"""Stable names for every HookPoint of a model, and running a model with hooks or a cache.

    logits, cache = run_with_cache(model, ids)                  # cache: name -> array (a copy)
    logits = run_with_hooks(model, ids, hooks={"blocks.0.attn.head_out": zero_head_2})

A hook is ``fn(array, name)``; it returns None to leave the activation as it is (the output is
then bit-identical to a run without hooks) or an array of the same shape to replace it
(ablate, patch, steer). Names may hold ``*`` wildcards (``blocks.*.attn.pattern``). Hooks are
removed when the call ends, also when it raises. The models run in eval mode.

Names (L = layer index; seq2seq names start with ``encoder.`` or ``decoder.``), shapes with
B = batch, T = positions, C = n_embd, H = heads, hs = head size, F = the feed-forward's width:

    embed                   token embeddings entering the stack          (B, T, C)
    pos_embed               the positions added to them                  (T, C); BERT (B, T, C)
    blocks.L.resid_pre      the residual stream entering block L         (B, T, C)
    blocks.L.attn.q/k/v     queries, keys, values                        (B, H, T, hs)
    blocks.L.attn.pattern   attention weights                            (B, H, Tq, Tk)
    blocks.L.attn.head_out  each head's output, before the out projection (B, H, T, hs)
    blocks.L.attn.out       the attention sub-layer's output             (B, T, C)
    blocks.L.resid_mid      the residual stream after the attention      (B, T, C)
    blocks.L.cross_attn.*   (seq2seq decoder) cross attention, as attn.*
    blocks.L.resid_cross    (seq2seq decoder) after the cross attention   (B, T, C)
    blocks.L.mlp.pre/post   the feed-forward before / after the activation (B, T, F)
    blocks.L.mlp.out        the feed-forward's output                    (B, T, C)
    blocks.L.resid_post     the residual stream leaving block L          (B, T, C)
    ln_final                the stack's output after the final norm      (B, T, C)

The names come from the model's contract (models/base.py: `stacks`, `block_parts`,
`named_hook_points`), never from its attribute names; a hook point the contract does not name
keeps its module path without the ``hook_`` prefixes.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from scratchformer.checks import ascii_digits
from scratchformer.errors import DTypeError, HookError
from scratchformer.models.base import Model
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.module import Module, eval_mode

__all__ = [
    "hook_points",
    "hook_names",
    "grad_hook_names",
    "resolve_names",
    "hooked",
    "run_with_cache",
    "run_with_hooks",
]

Hook = Callable[[np.ndarray, str], "np.ndarray | None"]


def _plain(path: str) -> str:
    """A module path inside a block or sub-layer -> its stable tail (``hook_q`` -> ``q``)."""
    return ".".join(p.removeprefix("hook_") for p in path.split("."))


def _contract_names(model: Module) -> dict[int, str]:
    """id(HookPoint) -> stable name, from the model's contract (models/base.py): its hook
    points outside the blocks by name; each stack's final norm as ``{prefix}final_norm``; inside
    each block of each stack ``{prefix}blocks.{i}.`` + the part's name from `block_parts` (the
    sub-layers ``attn``, ``cross_attn``, ``mlp``; the norms ``attn_norm``, ``cross_norm``,
    ``ff_norm``) + the hook point's path inside that part; the block's own points by their path."""
    if not isinstance(model, Model):
        return {}
    names = {id(hp): name for name, hp in model.named_hook_points().items()}
    for prefix, blocks in model.stacks().items():
        final = model.final_norm(prefix)
        if final is not None:
            _name_inside(names, final, f"{prefix}final_norm.")
        for i, block in enumerate(blocks):
            base = f"{prefix}blocks.{i}."
            parts = model.block_parts(block)
            mlp = {"mlp": parts.feedforward} if parts.feedforward is not None else {}
            for sub, module in {**parts.attentions, **mlp, **parts.norms}.items():
                _name_inside(names, module, base + sub + ".")
            _name_inside(names, block, base)
    return names


def _name_inside(names: dict[int, str], module: Module, base: str) -> None:
    """Name each HookPoint inside `module` not named yet: base + its path without ``hook_``."""
    for path, hp in module.named_modules():
        if isinstance(hp, HookPoint):
            names.setdefault(id(hp), base + _plain(path))


# the order a forward meets the names in, within a stack and within a block (a post-norm
# block meets each norm after its sub-layer; a name these tables do not hold comes after the
# known ones of its part)
_SIDES = ("encoder", "decoder")
_STACK_ORDER = ("embed", "pos_embed", "embed_norm", "blocks", "final_norm", "ln_final")
_PRE_NORM = ("resid_pre", "attn_norm", "attn", "resid_mid", "cross_norm", "cross_attn", "resid_cross")
_PRE_NORM += ("ff_norm", "mlp", "resid_post")
_POST_NORM = ("resid_pre", "attn", "attn_norm", "resid_mid", "cross_attn", "cross_norm", "resid_cross")
_POST_NORM += ("mlp", "ff_norm", "resid_post")
_SUB_ORDER = ("in", "q", "k", "v", "scores", "pattern", "head_out", "pre", "post", "out")


def _rank(table: tuple, part: str) -> int:
    return table.index(part) if part in table else len(table)


def _forward_order(name: str, post_norm: set[str]) -> tuple:
    """A sort key of `name`; post_norm: the hook-name prefixes of the post-norm blocks."""
    parts = name.split(".")
    side = 0
    if parts[0] in _SIDES and len(parts) > 1:
        side, parts = _SIDES.index(parts[0]), parts[1:]
    if parts[0] != "blocks" or len(parts) < 3 or not ascii_digits(parts[1]):
        return (side, _rank(_STACK_ORDER, parts[0]), 0, 0, 0, name)
    layer, rest = int(parts[1]), parts[2:]
    block = _POST_NORM if name[: -len(".".join(rest))] in post_norm else _PRE_NORM
    sub = _rank(_SUB_ORDER, rest[1]) if len(rest) > 1 else -1
    return (side, _rank(_STACK_ORDER, "blocks"), layer, _rank(block, rest[0]), sub, name)


def hook_points(model: Module) -> dict[str, HookPoint]:
    """Stable name -> HookPoint, in the order a forward meets them."""
    check_model(model)
    known = _contract_names(model)
    points = {
        known.get(id(hp)) or _plain(path): hp
        for path, hp in model.named_modules()
        if isinstance(hp, HookPoint)
    }
    post_norm = set()  # the blocks whose norms come after their sub-layers
    if isinstance(model, Model):
        for prefix, blocks in model.stacks().items():
            post_norm |= {
                f"{prefix}blocks.{i}." for i, b in enumerate(blocks) if not model.block_parts(b).norm_first
            }
    return dict(sorted(points.items(), key=lambda kv: _forward_order(kv[0], post_norm)))


def check_model(model) -> None:
    """The lens studies scratchformer models: anything else is one typed error, not an
    AttributeError from deep inside."""
    if not isinstance(model, Module):
        raise DTypeError(
            f"model must be a scratchformer model (a Module such as GPT), got {type(model).__name__}"
        )


def hook_names(model: Module) -> list[str]:
    """Every hook name of `model` (see the module docstring)."""
    return list(hook_points(model))


def grad_hook_names(model: Module) -> list[str]:
    """The names whose gradient a model's backward shows to a gradient hook: the input token
    embeddings of each stack (``embed``, ``encoder.embed``, ``decoder.embed``) and each
    feed-forward's activation (``blocks.L.mlp.post``: `FeedForward.backward` passes its gradient
    through that hook point)."""
    return [n for n in hook_names(model) if n.split(".")[-1] == "embed" or n.endswith(".mlp.post")]


def resolve_names(model: Module, names) -> list[str]:
    """Expand `*` patterns; HookError naming the closest names for a name nothing matches."""
    known = hook_names(model)
    out: list[str] = []
    if not isinstance(names, (str, list, tuple, set)):
        raise HookError(f"names must be a hook name or a list of them, got {type(names).__name__}")
    for name in [names] if isinstance(names, str) else names:
        if not isinstance(name, str):
            raise HookError(f"hook names are strings, got {type(name).__name__}")
        matched = fnmatch.filter(known, name) if "*" in name else ([name] if name in known else [])
        if not matched:
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = (
                f"did you mean {', '.join(close)}?" if close else f"names look like {known[1]}, {known[-1]}"
            )
            raise HookError(
                f"no activation is named {name!r} in this {type(model).__name__}: {hint} "
                "(docs/lens.md lists the names)"
            )
        out += [n for n in matched if n not in out]
    return out


@contextmanager
def hooked(
    model: Module,
    hooks: dict[str, Hook] | None = None,
    grad_hooks: dict[str, Callable[[np.ndarray, str], None]] | None = None,
) -> Iterator[Module]:
    """Set forward hooks (and gradient hooks, called by the backward of the hook points a
    model's backward passes through: the input embeddings, `grad_hook_names`) for the block;
    every hook is removed on the way out, also on an error. A gradient hook on another name
    would never be called: HookError naming the names that support one."""
    points = hook_points(model)
    forward = {n: fn for pat, fn in (hooks or {}).items() for n in resolve_names(model, pat)}
    backward = {n: fn for pat, fn in (grad_hooks or {}).items() for n in resolve_names(model, pat)}
    supported = grad_hook_names(model)
    for name in backward:
        if name not in supported:
            raise HookError(
                f"no gradient reaches a hook at {name}: the hand-written backward calls gradient hooks "
                f"at the input embeddings and the feed-forward activations only ({', '.join(supported)})"
            )
    for name, fn in {**forward, **backward}.items():
        if not callable(fn):
            raise HookError(
                f"the hook for {name} must be a function fn(array, name), got {type(fn).__name__}"
            )
    try:
        for name in set(forward) | set(backward):
            points[name].set_hooks(name, forward.get(name), backward.get(name))
        yield model
    finally:
        for hp in points.values():
            hp.remove_hooks()


def run_with_hooks(model: Module, *inputs, hooks: dict[str, Hook], **kwargs):
    """model(*inputs, **kwargs) in eval mode with `hooks` set; returns the model's output."""
    with eval_mode(model), hooked(model, hooks):
        return model(*inputs, **kwargs)


def run_with_cache(model: Module, *inputs, names=None, hooks: dict[str, Hook] | None = None, **kwargs):
    """(model's output, {name: a copy of the activation}) in eval mode. names: the names (or
    `*` patterns) to keep, None = all. `hooks` run first, so the cache holds what they return."""
    cache: dict[str, np.ndarray] = {}
    wanted = hook_names(model) if names is None else resolve_names(model, names)

    def keep(x, name):
        cache[name] = np.array(x, copy=True)

    hooks = dict(hooks or {})
    resolved = {n: fn for pat, fn in hooks.items() for n in resolve_names(model, pat)}
    combined = {}
    for name in set(wanted) | set(resolved):
        fn = resolved.get(name)
        if name in wanted:
            combined[name] = _then_keep(fn, keep)
        else:
            combined[name] = fn
    with eval_mode(model), hooked(model, combined):
        out = model(*inputs, **kwargs)
    return out, {name: cache[name] for name in hook_names(model) if name in cache}


def _then_keep(fn, keep):
    """The hook `fn`, then `keep` of the activation the model goes on with: what fn returned (or
    its copy x as fn left it), in the activation's dtype, as `HookPoint` hands it on."""
    if fn is None:
        return keep

    def both(x, name):
        out = fn(x, name)
        keep(x if out is None else np.asarray(out).astype(x.dtype, copy=False), name)
        return out

    return both
