"""Memory estimates before allocating (scratchformer/limits/) and the bundled data sets."""

import dataclasses
import hashlib

import pytest
from config_values import variations

from scratchformer.data.datasets import check_line_lengths, resolve_data
from scratchformer.errors import DataError, ResourceError
from scratchformer.limits import (
    activation_bytes,
    available_memory,
    check_fits,
    check_model_fits,
    generation_bytes,
    model_flops_per_token,
    param_count_bound,
    training_state_bytes,
)
from scratchformer.models.gpt import GPT, GPTConfig


def test_available_memory_is_a_plausible_number():
    avail = available_memory()
    assert avail is None or 2**20 < avail < 2**50


GPT_CONFIGS = [
    dict(),
    dict(tie_weights=True),
    dict(n_inner=40, bias=False),
    # Llama blocks: SwiGLU's third matrix, grouped-query key/value heads, RMSNorm, no biases
    dict(
        positional="rope",
        normalization="rmsnorm",
        activation="swiglu",
        bias=False,
        n_head=4,
        n_kv_head=2,
        tie_weights=False,
    ),
    dict(positional="sinusoidal", activation="swiglu", n_kv_head=1, norm_first=False),
    dict(attn_only=True),
    dict(attn_only=True, bias=False, normalization="rmsnorm", tie_weights=False),
]


@pytest.mark.parametrize("kw", GPT_CONFIGS)
def test_param_count_is_the_real_models_count(kw):
    """The class counts the parameters its constructor builds, exactly, from the config alone
    (the old count knew neither SwiGLU's third matrix nor grouped-query attention)."""
    cfg = GPTConfig(**{**dict(vocab_size=27, block_size=16, n_layer=2, n_head=2, n_embd=8), **kw})
    real = GPT(cfg).num_parameters()
    assert GPT.param_count(cfg) == real
    assert param_count_bound(cfg, GPT) == real
    assert param_count_bound(cfg.to_dict(), GPT) == real  # a config.json "model" dict works too


TINY_GPT = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8)
LLAMA_GPT = dict(
    TINY_GPT, positional="rope", normalization="rmsnorm", activation="swiglu", bias=False, n_kv_head=1
)


def _families():
    from scratchformer.models import (
        ClassifierConfig,
        Seq2SeqConfig,
        Seq2SeqTransformer,
        TransformerClassifier,
    )

    return [
        (GPT, GPTConfig, TINY_GPT),
        (GPT, GPTConfig, LLAMA_GPT),
        (
            TransformerClassifier,
            ClassifierConfig,
            dict(vocab_size=5, n_classes=3, max_len=8, n_layer=1, n_head=2, n_embd=8),
        ),
        (
            Seq2SeqTransformer,
            Seq2SeqConfig,
            dict(src_vocab_size=7, tgt_vocab_size=7, max_len=8, n_layer=1, n_head=2, n_embd=8),
        ),
    ]


@pytest.mark.parametrize("family", range(4), ids=["gpt", "llama-gpt", "classifier", "seq2seq"])
def test_every_setting_is_counted_exactly(family):
    """The recipe's parameter count step (docs/architecture.md), enforced: every value of every
    setting, generated from the config's declared specs (tests/config_values.py) one setting at
    a time around a tiny base, builds a model whose `num_parameters()` is `param_count(config)`.
    A setting added to a config joins this test by itself; forgetting to count its weights fails."""
    model_class, config_class, base = _families()[family]
    configs = variations(config_class, base)
    changed = {
        f.name
        for f in dataclasses.fields(config_class)
        for c in configs
        if getattr(c, f.name) != getattr(config_class(**base), f.name)
    }
    assert changed == {f.name for f in dataclasses.fields(config_class)}  # every setting was tried
    for config in configs:
        assert model_class.param_count(config) == model_class(config).num_parameters(), config


def test_task_model_counts_are_exact():
    from scratchformer.models import (
        ClassifierConfig,
        Seq2SeqConfig,
        Seq2SeqTransformer,
        TransformerClassifier,
    )

    for model in (
        TransformerClassifier(
            ClassifierConfig(vocab_size=3, n_classes=3, max_len=8, n_layer=2, n_head=2, n_embd=16)
        ),
        TransformerClassifier(
            ClassifierConfig(
                vocab_size=3,
                n_classes=3,
                max_len=8,
                n_layer=1,
                n_head=2,
                n_embd=16,
                pooling="cls",
                positional="learned",
                norm_first=False,
            )
        ),
        Seq2SeqTransformer(
            Seq2SeqConfig(
                src_vocab_size=13,
                tgt_vocab_size=13,
                max_len=13,
                n_layer=2,
                n_head=2,
                n_embd=16,
                share_embeddings=True,
            )
        ),
        Seq2SeqTransformer(
            Seq2SeqConfig(
                src_vocab_size=13,
                tgt_vocab_size=11,
                max_len=13,
                n_layer=1,
                n_decoder_layers=2,
                n_head=2,
                n_embd=16,
                norm_first=False,
            )
        ),
    ):
        real = model.num_parameters()
        assert param_count_bound(model.config, type(model)) == real, type(model).__name__
        assert (
            param_count_bound(model.config.to_dict(), type(model)) == real
        )  # config.json's "model" dict too


@pytest.mark.parametrize("vocab_size,max_length", [(79, 192), (30522, 64), (79, 512)])
def test_bert_classifier_count_has_the_whole_position_table_types_and_head(vocab_size, max_length):
    """A character-level BERT (79 tokens) reads 192-token texts but holds 512 positions: the
    count must not stop at max_length, or its own checkpoint is refused as not matching."""
    from scratchformer.interop.bert import BertEncoder
    from scratchformer.interop.bert_classifier import BertClassifier, SentenceClassifierConfig

    cfg = SentenceClassifierConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        labels=list("abcdefgh"),
        max_length=max_length,
    )
    real = BertClassifier(BertEncoder(cfg.bert_config()), cfg.num_classes).num_parameters()
    assert param_count_bound(cfg.to_dict(), BertClassifier) == real
    assert BertEncoder.param_count(cfg.bert_config()) == BertEncoder(cfg.bert_config()).num_parameters()


def test_model_check_names_the_options_and_flops_follow_nanogpt(monkeypatch):
    import scratchformer.limits.memory as limits

    cfg = GPTConfig(vocab_size=27, block_size=16, n_layer=2, n_head=2, n_embd=8)
    monkeypatch.setattr(limits, "memory_limits", lambda: {"the machine's available memory": 10**9})
    check_model_fits(cfg, GPT, training=True)
    with pytest.raises(
        ResourceError, match=r"model of about .* parameters with its training state .*lower --n-embd"
    ):
        check_model_fits({**cfg.to_dict(), "n_embd": 2**16}, GPT, training=True)
    model = GPT(cfg)
    assert model_flops_per_token(model) == 6 * model.num_parameters() + 12 * 2 * 8 * 16


def test_estimates_grow_as_their_formulas_say():
    assert training_state_bytes(1000) == 16_000  # weights, grads, m, v in float32
    base = activation_bytes(4, 16, 2, 8, 2, 27)
    assert activation_bytes(8, 16, 2, 8, 2, 27) == 2 * base  # linear in the batch
    assert (
        activation_bytes(4, 16, 2, 8, 2, 27, per_layer_factor=0)
        == (2 * 2 * 4 * 2 * 16 * 16 + 3 * 4 * 16 * 27) * 4
    )
    # the 200,000-character names line of issue 9: block 200,001, default batch 64 -> far past any machine
    assert activation_bytes(64, 200_001, 4, 64, 4, 27) > 1e14
    assert generation_bytes(10, 5, 100, 2, 8, 27) == (2 * 2 * 10 * 105 * 8 + 4 * 10 * 27) * 4


def test_check_fits_names_the_option_and_the_numbers():
    check_fits(800, "a training batch", "--batch-size", available=1000)  # fits in 90%
    with pytest.raises(ResourceError) as e:
        check_fits(37e9, "a training batch", "--batch-size or --block-size", available=8e9)
    msg = str(e.value)
    assert msg == (
        "a training batch needs about 37 GB of memory but 8 GB is available: "
        "lower --batch-size or --block-size"
    )
    assert isinstance(e.value, MemoryError)


def test_check_fits_skips_when_memory_is_unknown(monkeypatch):
    import scratchformer.limits.memory as limits

    monkeypatch.setattr(limits, "memory_limits", lambda: {})
    check_fits(10**30, "anything", "--x")


def test_long_line_is_named_by_number():
    check_line_lengths(["emma", "olivia"], "names.txt", limit=6)
    with pytest.raises(
        DataError, match=r"^n.txt line 3 has 200,000 characters .*limit for a lines file is 1,000"
    ):
        check_line_lengths(["ann", "bo", "x" * 200_000, "y" * 200_000], "n.txt")


# -- bundled data sets -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, sha",
    [
        ("names", "0a30b5557f192f32ab962680889aac5f6fda0f4cecf40a6d0b5694f58ea8cc4d"),
        ("shakespeare", "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
        ("tinyshakespeare", "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
        (None, "0a30b5557f192f32ab962680889aac5f6fda0f4cecf40a6d0b5694f58ea8cc4d"),
    ],
)
def test_bundled_names_resolve_to_the_shipped_files(name, sha):
    assert hashlib.sha256(resolve_data(name).read_bytes()).hexdigest() == sha


def test_paths_resolve_or_fail_in_one_line(tmp_path):
    f = tmp_path / "mine.txt"
    f.write_text("abc\n")
    assert resolve_data(str(f)) == f and resolve_data(f) == f
    for bad, words in [
        ("", "empty data path"),
        (str(tmp_path / "nope.txt"), "data file not found"),
        (str(tmp_path), "is not a file"),
    ]:
        with pytest.raises(DataError, match=words) as e:
            resolve_data(bad)
        assert "\n" not in str(e.value)


# -- the limits the process really has: the smallest of the machine, the cgroup and ulimit -v ------
def test_the_cgroup_limit_is_read_in_either_version(tmp_path, monkeypatch):
    import scratchformer.limits.memory as limits

    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "job" / "memory.max").write_text("3000000000\n")
    (v2 / "job" / "memory.current").write_text("1000000000\n")
    v1 = tmp_path / "v1"
    (v1 / "memory" / "job").mkdir(parents=True)
    (v1 / "memory" / "job" / "memory.limit_in_bytes").write_text("2000000000\n")
    (v1 / "memory" / "job" / "memory.usage_in_bytes").write_text("500000000\n")
    unlimited = tmp_path / "none"
    unlimited.mkdir()
    (unlimited / "memory.max").write_text("max\n")
    real = limits._read_first

    def fake(cgroup):
        return lambda path: cgroup if path == "/proc/self/cgroup" else real(path)

    monkeypatch.setattr(limits, "_read_first", fake("0::/job"))
    assert limits._cgroup_left(str(v2)) == 2_000_000_000
    monkeypatch.setattr(limits, "_read_first", fake("4:memory:/job\n0::/"))
    assert limits._cgroup_left(str(v1)) == 1_500_000_000
    monkeypatch.setattr(limits, "_read_first", fake("0::/"))
    assert limits._cgroup_left(str(unlimited)) is None


def test_the_smallest_limit_wins_and_is_named(monkeypatch):
    import resource

    import scratchformer.limits.memory as limits

    soft = 3 << 30
    monkeypatch.setattr(
        resource,
        "getrlimit",
        lambda which: (
            (soft, resource.RLIM_INFINITY) if which == resource.RLIMIT_AS else (resource.RLIM_INFINITY,) * 2
        ),
    )
    monkeypatch.setattr(limits, "_machine_available", lambda: 64 << 30)
    monkeypatch.setattr(limits, "_cgroup_left", lambda: None)
    left = limits.memory_limits()["the address-space limit (ulimit -v)"]
    assert 0 <= left < soft  # what this process has mapped already counts
    assert limits.available_memory() == left
    with pytest.raises(ResourceError) as e:
        check_fits(4 << 30, "a training batch", "--batch-size")
    assert "is available under the address-space limit (ulimit -v): lower --batch-size" in str(e.value)
    monkeypatch.setattr(limits, "_cgroup_left", lambda: 1 << 20)
    assert limits.available_memory() == 1 << 20


def test_text_data_and_workers_are_estimated_naming_their_option(tmp_path, monkeypatch):
    import scratchformer.limits.memory as limits
    from scratchformer.data import read_text
    from scratchformer.limits import check_training_fits

    data = tmp_path / "big.txt"
    data.write_text("hello world\n" * 1000)  # 12,000 bytes: about 120 kB to read and encode
    monkeypatch.setattr(limits, "memory_limits", lambda: {"the cgroup's memory limit": 100_000})
    with pytest.raises(ResourceError) as e:
        read_text(data)
    assert str(e.value).startswith(f"reading the data file {data} (12,000 bytes) needs about")
    assert str(e.value).endswith("under the cgroup's memory limit: give --data a smaller file")
    monkeypatch.setattr(limits, "memory_limits", lambda: {"the cgroup's memory limit": 200_000})
    assert read_text(data)[0].startswith("hello")
    model = GPT(GPTConfig(vocab_size=27, block_size=16, n_layer=1, n_head=2, n_embd=8))
    one = 3 * model.num_parameters() * 4 + activation_bytes(8, 16, 1, 8, 2, 27)
    monkeypatch.setattr(
        limits, "memory_limits", lambda: {"the machine's available memory": 2 * one + (64 << 20)}
    )
    check_training_fits(model, 8, workers=1)
    with pytest.raises(
        ResourceError, match="in 8 processes .* lower --batch-size or --block-size, or --workers"
    ):
        check_training_fits(model, 8, workers=8)
