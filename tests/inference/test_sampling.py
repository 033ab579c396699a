"""Sampling (temperature, top-k, top-p) and GPT.generate (KV cache, cropping, eos)."""

from __future__ import annotations

import numpy as np
import pytest

from scratchformer.errors import ConfigError, DataError
from scratchformer.inference import filtered_probs, sample_next, top_p_mask
from scratchformer.models import GPT, GPTConfig

N_DRAWS = 20000


def _rows(logits, n=N_DRAWS):
    return np.tile(np.asarray(logits, dtype=np.float64), (n, 1))


def _freq(ids, V):
    return np.bincount(ids, minlength=V) / ids.size


# -- sample_next ------------------------------------------------------------------------------------
def test_greedy_is_argmax_and_draws_nothing():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(16, 30))
    state = rng.bit_generator.state
    np.testing.assert_array_equal(sample_next(logits, rng, top_k=1), logits.argmax(-1))
    np.testing.assert_array_equal(sample_next(logits, rng, temperature=0), logits.argmax(-1))
    np.testing.assert_array_equal(sample_next(logits, rng, temperature=0.0, top_p=0.5), logits.argmax(-1))
    assert rng.bit_generator.state == state
    assert sample_next(logits, rng).dtype == np.int64 and sample_next(logits, rng).shape == (16,)


def test_plain_sampling_follows_the_softmax():
    logits = np.log([0.1, 0.2, 0.3, 0.4])
    ids = sample_next(_rows(logits), np.random.default_rng(0))
    np.testing.assert_allclose(_freq(ids, 4), [0.1, 0.2, 0.3, 0.4], atol=0.015)


def test_top_k_only_samples_the_k_best():
    logits = np.array([0.0, 3.0, 1.0, 2.5, -1.0, 2.9])
    ids = sample_next(_rows(logits), np.random.default_rng(0), top_k=3)
    f = _freq(ids, 6)
    assert set(np.flatnonzero(f)) == {1, 3, 5}
    p = np.exp(logits[[1, 3, 5]])
    p /= p.sum()
    np.testing.assert_allclose(f[[1, 3, 5]], p, atol=0.015)


def test_top_p_keeps_the_nucleus():
    probs = np.array([0.05, 0.5, 0.02, 0.3, 0.13])
    logits = np.log(probs)
    # 0.5 + 0.3 = 0.8 >= 0.7: the nucleus is {1, 3}; 0.5 + 0.3 + 0.13 >= 0.85: {1, 3, 4}
    np.testing.assert_array_equal(top_p_mask(probs[None], 0.7)[0], [False, True, False, True, False])
    np.testing.assert_array_equal(top_p_mask(probs[None], 0.85)[0], [False, True, False, True, True])
    ids = sample_next(_rows(logits), np.random.default_rng(1), top_p=0.7)
    f = _freq(ids, 5)
    assert set(np.flatnonzero(f)) == {1, 3}  # never outside the nucleus over 20000 draws
    np.testing.assert_allclose(f[[1, 3]], [0.5 / 0.8, 0.3 / 0.8], atol=0.015)
    # a tiny p still keeps one token (the most likely)
    assert set(sample_next(_rows(logits, 500), np.random.default_rng(2), top_p=1e-6)) == {1}
    # top_p = 1 keeps everything
    np.testing.assert_allclose(filtered_probs(logits[None], top_p=1.0)[0], probs / probs.sum(), rtol=1e-12)


def test_top_k_and_top_p_compose():
    logits = np.log([0.4, 0.3, 0.2, 0.1])
    p = filtered_probs(logits[None], top_k=3, top_p=0.75)[0]  # top-3 -> [4/9, 3/9, 2/9]; nucleus {0, 1}
    np.testing.assert_allclose(p, [4 / 7, 3 / 7, 0, 0], rtol=1e-12)


def test_temperature_sharpens_and_flattens():
    logits = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(
        filtered_probs(logits, temperature=2.0)[0],
        np.exp(logits[0] / 2) / np.exp(logits[0] / 2).sum(),
        rtol=1e-12,
    )
    cold = _freq(sample_next(_rows(logits[0]), np.random.default_rng(0), temperature=0.1), 3)
    hot = _freq(sample_next(_rows(logits[0]), np.random.default_rng(0), temperature=100.0), 3)
    assert cold[2] > 0.99
    np.testing.assert_allclose(hot, 1 / 3, atol=0.02)


def test_seeded_sampling_is_deterministic():
    logits = np.random.default_rng(0).normal(size=(64, 50))
    a = sample_next(logits, np.random.default_rng(7), temperature=0.9, top_k=20, top_p=0.9)
    b = sample_next(logits, np.random.default_rng(7), temperature=0.9, top_k=20, top_p=0.9)
    c = sample_next(logits, np.random.default_rng(8), temperature=0.9, top_k=20, top_p=0.9)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(
        sample_next(logits, 7, top_k=20), sample_next(logits, np.random.default_rng(7), top_k=20)
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -1.0},
        {"top_k": 0},
        {"top_k": 2.5},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"temperature": np.nan},
    ],
)
def test_invalid_sampling_arguments(kwargs):
    with pytest.raises(ValueError):
        sample_next(np.zeros((1, 5)), np.random.default_rng(0), **kwargs)


def test_sample_next_needs_2d_logits():
    with pytest.raises(ValueError):
        sample_next(np.zeros(5), np.random.default_rng(0))


# -- GPT.generate ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    m = GPT(GPTConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=16), seed=0)
    rng = np.random.default_rng(0)
    for p in m.parameters():  # sharper than the 0.02 init, so tokens are far from ties
        if p.data.ndim == 2:
            p.data[...] = rng.normal(0, 0.3, p.shape)
    return m


def _prompt(B=3, T=3, V=13, seed=0):
    return np.random.default_rng(seed).integers(0, V, (B, T))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"top_k": 1},
        {"temperature": 0},
        {"temperature": 1.0},
        {"temperature": 0.8, "top_k": 5},
        {"temperature": 1.3, "top_p": 0.9},
    ],
)
def test_cached_and_uncached_pick_identical_tokens(model, kwargs):
    prompt = _prompt()
    cached = model.generate(
        prompt, 12, rng=np.random.default_rng(5), use_cache=True, **kwargs
    )  # goes past block
    uncached = model.generate(prompt, 12, rng=np.random.default_rng(5), use_cache=False, **kwargs)
    assert cached.shape == (3, 15) and cached.dtype == np.int64
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_array_equal(cached[:, :3], prompt)


def test_cache_feeds_one_token_per_step(model, monkeypatch):
    seen = []
    orig = GPT._last_logits

    def spy(self, idx, caches=None, offset=0):
        seen.append((idx.shape[1], offset, caches is not None))
        return orig(self, idx, caches, offset)

    monkeypatch.setattr(GPT, "_last_logits", spy)
    model.generate(_prompt(T=3), 7, top_k=1)
    # prompt of 3 once, then 1 token per step at offsets 3..7; the window is then full -> crop
    assert seen[0] == (3, 0, True)
    assert seen[1:6] == [(1, 3, True), (1, 4, True), (1, 5, True), (1, 6, True), (1, 7, True)]
    assert seen[6:] == [(8, 0, False)]


def test_kv_cache_writes_in_place_grows_and_selects_rows():
    from scratchformer.nn import KVCache

    rng = np.random.default_rng(0)
    steps = [rng.standard_normal((2, 3, t, 4)).astype(np.float32) for t in (2, 1, 1, 3)]
    cache = KVCache(capacity=4)
    assert cache.k is None and cache.length == 0
    k, v = cache.append(steps[0], -steps[0])
    buffer = cache._k
    assert buffer.shape == (2, 3, 4, 4) and np.shares_memory(k, buffer)  # allocated once ...
    cache.append(steps[1], -steps[1])
    cache.append(steps[2], -steps[2])
    assert cache._k is buffer  # ... and written in place while it fits
    k, v = cache.append(steps[3], -steps[3])  # 7 > 4: grows, keeping the past
    whole = np.concatenate(steps, axis=2)
    assert cache.length == 7 and cache._k.shape[2] >= 7
    np.testing.assert_array_equal(k, whole)
    np.testing.assert_array_equal(v, -whole)
    cache.select(np.array([1, 1]))  # beam search's reorder: rows 1 and 1
    np.testing.assert_array_equal(cache.k, whole[[1, 1]])
    np.testing.assert_array_equal(cache.v, -whole[[1, 1]])


def test_generation_past_block_size(model):
    out = model.generate(_prompt(B=2, T=2), 30, rng=np.random.default_rng(0), top_k=4)
    assert out.shape == (2, 32)
    assert out.min() >= 0 and out.max() < 13


def test_long_prompt_is_cropped(model):
    long = _prompt(B=2, T=20, seed=3)
    out = model.generate(long, 5, top_k=1)
    assert out.shape == (2, 25)
    np.testing.assert_array_equal(out[:, :20], long)
    # only the last block_size tokens matter
    short = model.generate(long[:, -8:], 5, top_k=1)
    np.testing.assert_array_equal(out[:, 20:], short[:, 8:])


def test_batched_equals_one_by_one(model):
    prompt = _prompt(B=4, T=3, seed=1)
    batched = model.generate(prompt, 6, top_k=1)
    for b in range(4):
        np.testing.assert_array_equal(batched[b], model.generate(prompt[b : b + 1], 6, top_k=1)[0])


def test_seeded_generation_is_reproducible(model):
    a = model.generate(_prompt(), 10, temperature=1.0, rng=np.random.default_rng(3))
    b = model.generate(_prompt(), 10, temperature=1.0, rng=np.random.default_rng(3))
    c = model.generate(_prompt(), 10, temperature=1.0, rng=np.random.default_rng(4))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_eos_stops_and_pads(model, monkeypatch):
    prompt = _prompt(B=2, T=3, seed=2)
    free = model.generate(prompt, 10, top_k=1)
    eos = int(free[0, 4])  # row 0's second new token
    out = model.generate(prompt, 10, top_k=1, eos_id=eos)
    assert out.shape == (2, 13)
    for row_free, row in zip(free, out):
        new_free, new = row_free[3:], row[3:]
        hits = np.flatnonzero(new_free == eos)
        if hits.size:
            first = hits[0]
            np.testing.assert_array_equal(new[: first + 1], new_free[: first + 1])
            assert (new[first:] == eos).all()
        else:
            np.testing.assert_array_equal(new, new_free)
    # when every sequence has finished, the loop stops early
    calls = []
    orig = GPT._last_logits
    monkeypatch.setattr(GPT, "_last_logits", lambda self, *a, **k: calls.append(1) or orig(self, *a, **k))
    first_new = int(free[0, 3])
    out = model.generate(prompt[:1], 10, top_k=1, eos_id=first_new)
    assert len(calls) == 1 and out.shape == (1, 13) and (out[0, 3:] == first_new).all()


def test_generate_restores_mode_and_validates(model):
    model.train()
    model.generate(_prompt(), 2, top_k=1)
    assert model.training and all(m.training for m in model.modules())
    model.eval()
    model.generate(_prompt(), 2, top_k=1)
    assert not model.training
    model.train()
    with pytest.raises(DataError):
        model.generate(np.array([[1, 13]]), 2)
    with pytest.raises(DataError):
        model.generate(np.array([[1.0, 2.0]]), 2)
    with pytest.raises(ConfigError, match=r"eos_id must be an integer in \[0, 13\), got 13"):
        model.generate(_prompt(), 2, eos_id=13)
    with pytest.raises(ConfigError, match=r"eos_id must be an integer in \[0, 13\), got 1.5"):
        model.generate(_prompt(), 2, eos_id=1.5)  # issue 9: a float eos_id never matched, never stopped
    with pytest.raises(ConfigError, match="eos_id"):
        model.generate(_prompt(), 2, eos_id=True)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        model.generate(_prompt(), -1)
    for bad in (float("inf"), float("nan"), -1.0):
        with pytest.raises(ConfigError, match="temperature must be a finite number >= 0"):
            model.generate(_prompt(), 2, temperature=bad)
    with pytest.raises(ConfigError, match="top_k"):
        model.generate(_prompt(), 2, top_k=0)
    with pytest.raises(ConfigError, match="top_p"):
        model.generate(_prompt(), 2, top_p=1.5)
    np.testing.assert_array_equal(model.generate(_prompt(), 0), _prompt())


# -- non-finite logits and extreme temperatures (issue 9) -------------------------------------------
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_sample_next_rejects_nan_logits_instead_of_returning_token_0(temperature):
    logits = np.full((2, 5), np.nan)
    with pytest.raises(DataError, match="NaN"):
        sample_next(logits, np.random.default_rng(0), temperature=temperature)
    partly = np.zeros((2, 5))
    partly[1, 3] = np.nan
    with pytest.raises(DataError, match="NaN"):
        sample_next(partly, np.random.default_rng(0), temperature=temperature)
    with pytest.raises(DataError, match="finite maximum"):
        sample_next(np.full((1, 4), -np.inf), np.random.default_rng(0))


def test_tiny_temperature_is_greedy_not_a_boundary_token():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((64, 50))
    best = logits.argmax(axis=-1)
    for t in (1e-320, 5e-324, 1e-300, 1e-30):
        np.testing.assert_array_equal(sample_next(logits, rng, temperature=t), best)
    # -inf logits (masked tokens) are fine, and never drawn
    masked = np.where(np.arange(50) % 2 == 0, logits, -np.inf)
    ids = sample_next(masked, rng, temperature=1.0)
    assert np.all(ids % 2 == 0)


# -- beam width bounds (issue 18 item 17) -----------------------------------------------------
def _tiny_seq2seq():
    from scratchformer.models import Seq2SeqConfig, Seq2SeqTransformer

    return Seq2SeqTransformer(
        Seq2SeqConfig(
            src_vocab_size=13,
            tgt_vocab_size=13,
            max_len=8,
            n_layer=1,
            n_head=2,
            n_embd=8,
            pad_id=10,
            bos_id=11,
            eos_id=12,
        ),
        seed=0,
    )


@pytest.mark.parametrize("width", [2.0, "2", True, 0, -1, 10**6])
def test_beam_width_not_an_int_or_out_of_range_is_a_config_error(width):
    from scratchformer.errors import ConfigError
    from scratchformer.inference import beam_search

    with pytest.raises(ConfigError, match="beam_width"):
        beam_search(_tiny_seq2seq(), np.array([[1, 2, 3]]), beam_width=width)


def test_beam_that_cannot_fit_in_memory_is_refused_before_decoding(monkeypatch):
    from scratchformer.errors import ResourceError
    from scratchformer.inference import beam_search
    from scratchformer.inference.beam import beam_bytes
    from scratchformer.limits import memory as limits

    model = _tiny_seq2seq()
    need = beam_bytes(model, 1, 64, 3, 8)
    monkeypatch.setattr(
        limits, "memory_limits", lambda: {"the machine's available memory": need}
    )  # 90% of it is usable: too little
    with pytest.raises(ResourceError, match="beam_width"):
        beam_search(model, np.array([[1, 2, 3]]), beam_width=64)
    monkeypatch.setattr(limits, "memory_limits", lambda: {"the machine's available memory": 2 * need})
    assert beam_search(model, np.array([[1, 2, 3]]), beam_width=64).shape[0] == 1
