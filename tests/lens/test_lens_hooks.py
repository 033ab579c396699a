"""Hooks and the activation cache (scratchformer.lens.hooks) on every model family."""

from __future__ import annotations

import numpy as np
import pytest

from scratchformer.errors import HookError
from scratchformer.interop.bert import BertConfig, BertEncoder
from scratchformer.lens import hook_names, hook_points, hooked, run_with_cache, run_with_hooks
from scratchformer.models import GPT, GPTConfig
from scratchformer.models.classifier import ClassifierConfig, TransformerClassifier
from scratchformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

IDS = np.array([[1, 4, 2, 7, 3, 5]])


def _gpt(**kw):
    return GPT(
        GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8, dtype="float64", **kw), seed=0
    )


def _seq2seq():
    return Seq2SeqTransformer(
        Seq2SeqConfig(src_vocab_size=9, tgt_vocab_size=9, n_layer=2, n_embd=8, n_head=2), seed=0
    ).to(np.float64)


def _classifier(pooling="cls"):
    return TransformerClassifier(
        ClassifierConfig(vocab_size=11, n_classes=3, n_embd=8, n_head=2, pooling=pooling), seed=0
    ).to(np.float64)


def _bert():
    return BertEncoder(
        BertConfig(
            vocab_size=11, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16
        ),
        dtype=np.float64,
    )


FAMILIES = {
    "gpt": (_gpt, (IDS,), ["embed", "pos_embed", "ln_final", "blocks.1.attn.head_out", "blocks.0.resid_mid"]),
    "classifier": (_classifier, (IDS,), ["embed", "pos_embed", "ln_final", "blocks.1.mlp.post"]),
    "seq2seq": (
        _seq2seq,
        (IDS[:, :5], IDS[:, :4]),
        [
            "encoder.embed",
            "decoder.pos_embed",
            "encoder.blocks.1.attn.pattern",
            "decoder.blocks.0.cross_attn.pattern",
            "decoder.blocks.1.resid_cross",
            "decoder.ln_final",
        ],
    ),
    "bert": (_bert, (IDS,), ["embed", "pos_embed", "blocks.1.resid_post", "blocks.0.attn.q"]),
}


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_names_its_activations_and_caches_them_all(family):
    build, inputs, expected = FAMILIES[family]
    model = build()
    names = hook_names(model)
    assert set(expected) <= set(names)
    assert len(names) == len(set(names)) == len(hook_points(model))
    out, cache = run_with_cache(model, *inputs)
    assert list(cache) == names  # every hook point ran, in forward order
    model.eval()
    assert np.array_equal(_first(out), _first(model(*inputs)))


@pytest.mark.parametrize("family", FAMILIES)
def test_hooks_that_return_none_leave_the_output_bit_identical(family):
    build, inputs, _ = FAMILIES[family]
    model = build().eval()
    plain = _first(model(*inputs))
    seen = []
    out = run_with_hooks(model, *inputs, hooks={"*": lambda x, name: seen.append(name)})
    assert np.array_equal(_first(out), plain)
    assert seen == hook_names(model)


def test_pre_norm_residual_stream_adds_up_and_heads_sum_to_the_attention_output():
    model = _gpt()
    _, c = run_with_cache(model, IDS)
    for layer in range(2):
        b = f"blocks.{layer}."
        assert np.allclose(c[b + "resid_mid"], c[b + "resid_pre"] + c[b + "attn.out"], atol=1e-13)
        assert np.allclose(c[b + "resid_post"], c[b + "resid_mid"] + c[b + "mlp.out"], atol=1e-13)
        attn = model.h[layer].self_attn
        W, hs = attn.out_proj.weight.data, attn.head_size
        per_head = [c[b + "attn.head_out"][:, h] @ W[:, h * hs : (h + 1) * hs].T for h in range(2)]
        assert np.allclose(sum(per_head) + attn.out_proj.bias.data, c[b + "attn.out"], atol=1e-13)
    assert np.allclose(c["blocks.0.resid_pre"], c["embed"] + c["pos_embed"], atol=1e-15)


def test_a_replacement_changes_the_output_and_the_hooks_are_gone_afterwards():
    model = _gpt()
    plain = model.eval()(IDS)[0]

    def zero_head_1(x, name):
        x = x.copy()
        x[:, 1] = 0
        return x

    ablated = run_with_hooks(model, IDS, hooks={"blocks.0.attn.head_out": zero_head_1})[0]
    assert not np.allclose(ablated, plain)
    assert np.array_equal(model(IDS)[0], plain)  # removed
    # the cache holds what a hook returned
    _, c = run_with_cache(
        model, IDS, names=["blocks.0.attn.head_out"], hooks={"blocks.0.attn.head_out": zero_head_1}
    )
    assert list(c) == ["blocks.0.attn.head_out"] and not c["blocks.0.attn.head_out"][:, 1].any()
    # a replaced pattern: uniform causal attention
    T = IDS.shape[1]
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    out = run_with_hooks(
        model, IDS, hooks={"blocks.*.attn.pattern": lambda x, n: np.broadcast_to(uniform, x.shape)}
    )[0]
    assert not np.allclose(out, plain)


def test_hooks_are_removed_even_when_the_forward_raises():
    model = _gpt()

    def boom(x, name):
        raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError, match="hook failed"):
        run_with_hooks(model, IDS, hooks={"blocks.1.mlp.post": boom})
    assert not any(hp.active for hp in hook_points(model).values())
    with pytest.raises(HookError, match="keep the activation's shape"):
        run_with_hooks(model, IDS, hooks={"ln_final": lambda x, n: x[:, :2]})
    assert not any(hp.active for hp in hook_points(model).values())


def test_unknown_hook_names_are_a_typed_error_naming_close_matches():
    model = _gpt()
    with pytest.raises(HookError, match=r"'blocks\.0\.attn\.patern'.*did you mean blocks\.0\.attn\.pattern"):
        run_with_hooks(model, IDS, hooks={"blocks.0.attn.patern": lambda x, n: None})
    with pytest.raises(HookError, match="blocks.7"):
        run_with_cache(model, IDS, names=["blocks.7.resid_post"])
    with pytest.raises(HookError, match="must be a function"):
        run_with_hooks(model, IDS, hooks={"embed": 3})
    assert not any(hp.active for hp in hook_points(model).values())


def test_pattern_replacement_in_training_mode_is_refused():
    model = _gpt().train()
    with (
        hooked(model, {"blocks.0.attn.pattern": lambda x, n: x * 0.5}),
        pytest.raises(HookError, match="eval mode"),
    ):
        model(IDS)


def test_gradient_hook_on_the_embeddings_sees_the_input_gradient():
    model = _gpt().train()
    grads = {}
    with hooked(model, grad_hooks={"embed": lambda g, n: grads.setdefault(n, g.copy())}):
        logits, _ = model(IDS)
        g = np.zeros_like(logits)
        g[0, -1, 3] = 1
        model.backward(grad_output=g)
    # finite differences on the token embeddings of position 2
    emb = model.wte.weight.data
    tok, eps = IDS[0, 2], 1e-6
    model.eval()
    for c in range(3):
        emb[tok, c] += eps
        up = model(IDS)[0][0, -1, 3]
        emb[tok, c] -= 2 * eps
        down = model(IDS)[0][0, -1, 3]
        emb[tok, c] += eps
        assert abs((up - down) / (2 * eps) - grads["embed"][0, 2, c]) < 1e-7


def test_a_wrapped_model_keeps_the_wrappers_attribute_as_a_prefix():
    from scratchformer.interop.bert_classifier import BertClassifier

    model = BertClassifier(_bert(), 3)
    names = hook_names(model)
    assert names[:5] == [
        "encoder.embed",
        "encoder.pos_embed",
        "encoder.embed_norm.in",
        "encoder.embed_norm.out",
        "encoder.blocks.0.resid_pre",
    ]
    assert names[-1] == "encoder.blocks.1.resid_post"
    out, cache = run_with_cache(model, IDS)
    assert list(cache) == names and np.array_equal(out[0], model(IDS)[0])


@pytest.mark.parametrize(
    "make, embeds",
    [
        (_gpt, ["embed"]),
        (_seq2seq, ["encoder.embed", "decoder.embed"]),
        (_classifier, ["embed"]),
        (lambda: _bert(), ["embed"]),
    ],
)
def test_a_gradient_hook_is_called_at_every_name_that_accepts_one_and_refused_elsewhere(make, embeds):
    from scratchformer.lens.hooks import grad_hook_names

    model = make()
    supported = grad_hook_names(model)
    mlps = [n for n in hook_names(model) if n.endswith(".mlp.post")]
    assert mlps and supported == sorted(embeds + mlps, key=hook_names(model).index)
    for name in hook_names(model):
        if name in supported:
            continue
        with pytest.raises(HookError, match="input embeddings and the feed-forward activations only") as e:
            with hooked(model, grad_hooks={name: lambda g, n: None}):
                pass
        assert ", ".join(supported) in str(e.value) and len(str(e.value).splitlines()) == 1
    called = []
    model.train()
    with hooked(model, grad_hooks={name: lambda g, n: called.append(n) for name in supported}):
        out = model(*((IDS % 9, IDS[:, :4] % 9) if make is _seq2seq else (IDS,)))
        logits = out[0] if isinstance(out, tuple) else out
        model.backward(grad_output=np.ones_like(logits))
    assert sorted(called) == sorted(supported)


def test_the_cache_holds_what_the_model_ran_with_after_a_hook():
    """run_with_cache(hooks=...) keeps the activation the forward went on with: a pattern edited
    in place is the pattern the heads mix with (their output is pattern @ v), a replacement of
    another dtype is kept in the model's dtype, and an edit of the positions never reaches the
    position table."""
    model = _gpt().to(np.float32)
    T = IDS.shape[1]
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]

    def in_place(x, name):
        x[...] = uniform

    names = ["blocks.0.attn.v", "blocks.0.attn.pattern", "blocks.0.attn.head_out"]
    _, c = run_with_cache(model, IDS, names=names, hooks={"blocks.0.attn.pattern": in_place})
    assert np.array_equal(c["blocks.0.attn.pattern"][0, 0], uniform.astype(np.float32))
    np.testing.assert_allclose(
        c["blocks.0.attn.head_out"], c["blocks.0.attn.pattern"] @ c["blocks.0.attn.v"], rtol=1e-6
    )
    wide = run_with_cache(model, IDS, names=["embed"], hooks={"embed": lambda x, n: x.astype(np.float64) / 3})
    assert wide[1]["embed"].dtype == np.float32
    assert np.array_equal(wide[1]["embed"], (run_with_cache(model, IDS)[1]["embed"] / 3).astype(np.float32))
    table = model.wpe.weight.data.copy()

    def scale(x, name):
        x *= 2.0

    run_with_hooks(model, IDS, hooks={"pos_embed": scale})
    assert np.array_equal(model.wpe.weight.data, table)


def test_a_layer_added_inside_a_block_shows_its_hook_points_with_no_change_in_the_lens():
    """A norm on each head's queries (QK-norm's shape), built from an nn layer, is named by where
    it sits (blocks.L.attn.q_norm.in / .out) and cached as the forward ran it."""
    from scratchformer.nn import MultiHeadAttention, RMSNorm

    class QNormAttention(MultiHeadAttention):
        def self_qkv(self, x, offset=0):
            q, k, v = super().self_qkv(x, offset)
            return self.q_norm(q), k, v

    model = _gpt()
    for block in model.h:
        block.self_attn.__class__ = QNormAttention
        block.self_attn.q_norm = RMSNorm(block.self_attn.head_size, dtype=np.float64)
    names = hook_names(model)
    i = names.index("blocks.0.attn.q_norm.in")
    assert names[i + 1] == "blocks.0.attn.q_norm.out" and names.index("blocks.1.attn.q_norm.out") > i
    _, c = run_with_cache(model, IDS)
    assert np.array_equal(c["blocks.0.attn.q_norm.out"], c["blocks.0.attn.q"])
    assert not np.allclose(c["blocks.0.attn.q_norm.in"], c["blocks.0.attn.q"])


@pytest.mark.parametrize("family", FAMILIES)
def test_scores_and_norms_are_what_the_attention_and_the_block_computed(family):
    """attn.scores are q k^T / sqrt(hs), -inf at hidden keys, the pattern their softmax; each
    norm's out is the norm of its in; a replaced score moves the pattern and the output."""
    build, inputs, _ = FAMILIES[family]
    model = build()
    _, c = run_with_cache(model, *inputs)
    prefix = "encoder." if family == "seq2seq" else ""
    a = f"{prefix}blocks.0.attn."
    q, k = c[a + "q"], c[a + "k"]
    T = q.shape[2]
    seen = np.tril(np.ones((T, T), bool)) if model.causal(prefix) else np.ones((T, T), bool)
    scores = np.where(seen, q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1]), -np.inf)
    np.testing.assert_allclose(c[a + "scores"], scores, atol=1e-12)
    e = np.exp(c[a + "scores"] - c[a + "scores"].max(-1, keepdims=True))
    np.testing.assert_allclose(c[a + "pattern"], e / e.sum(-1, keepdims=True), atol=1e-12)
    block = model.stacks()[prefix][0]
    for name, norm in model.block_parts(block).norms.items():  # each norm's own in and out
        n = f"{prefix}blocks.0.{name}."
        np.testing.assert_array_equal(c[n + "out"], norm(c[n + "in"]))
    flat = run_with_cache(
        model, *inputs, names=[a + "pattern"], hooks={a + "scores": lambda x, n: np.zeros_like(x)}
    )[1]
    # zeros everywhere: uniform over the keys each query may see (a hidden key stays hidden)
    np.testing.assert_allclose(flat[a + "pattern"][0, 0], seen / seen.sum(-1, keepdims=True))
