"""scratchformer.viz: every figure writes a PNG of its size, heatmaps draw the model's own
weights, the trace reproduces the forward, and report.html is self-contained and decodable."""

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scratchformer import viz
from scratchformer.data.tokenizer import CharTokenizer
from scratchformer.errors import DataError, RunFileError, ShapeError
from scratchformer.interop.bert import BertConfig, BertEncoder
from scratchformer.models.classifier import ClassifierConfig, TransformerClassifier
from scratchformer.models.gpt import GPT, GPTConfig
from scratchformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from scratchformer.nn import manual_seed
from scratchformer.ops import attention_forward
from scratchformer.viz import trace as T

ROOT = Path(__file__).resolve().parents[2]
TEXT = "hello world"
TOK = CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz ")


def png_size(path) -> tuple[int, int]:
    """(width, height) from the PNG header."""
    head = Path(path).read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def tiny_gpt(n_layer=2, n_head=2, n_embd=16, block_size=16, vocab_size=TOK.vocab_size):
    return GPT(
        GPTConfig(
            vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd
        ),
        seed=0,
    )


def tiny_classifier(pooling="cls"):
    manual_seed(1)
    return TransformerClassifier(
        ClassifierConfig(
            vocab_size=TOK.vocab_size,
            n_classes=3,
            max_len=16,
            n_layer=2,
            n_head=2,
            n_embd=16,
            pooling=pooling,
            positional="learned",
        )
    )


def tiny_seq2seq():
    manual_seed(2)
    return Seq2SeqTransformer(
        Seq2SeqConfig(src_vocab_size=12, tgt_vocab_size=12, max_len=12, n_layer=2, n_head=2, n_embd=16)
    )


@pytest.fixture(scope="module")
def gpt():
    return tiny_gpt()


@pytest.fixture(scope="module")
def ids():
    return TOK.encode(TEXT)


# -- import cost -----------------------------------------------------------------------------
def test_import_does_not_load_matplotlib():
    code = (
        "import sys, scratchformer, scratchformer.viz; "
        "assert 'matplotlib' not in sys.modules, 'matplotlib was imported'"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# -- every figure function -------------------------------------------------------------------
def _figure_calls(gpt, ids):
    tokens = list(TEXT)
    maps = T.attention_maps(gpt, ids)
    tr = T.trace(gpt, ids)
    q, k, v = (tr.head(layer=1, head=1)[x] for x in "qkv")
    tok, pos = T.token_table(gpt), T.position_table(gpt)
    s2s = tiny_seq2seq()
    src, tgt = np.array([3, 4, 5, 6]), np.array([1, 6, 5, 4, 3])
    s2s_maps = T.attention_maps(s2s, src, tgt)
    rows = [
        {"step": 0, "lr": 1e-3, "train_loss": 3.0, "grad_norm": 1.0, "tokens_per_s": 900.0},
        {"step": 10, "lr": 2e-3, "train_loss": 2.5, "val_loss": 2.6},
        {"step": 20, "train_loss": 2.0, "tokens_per_s": 950.0},
    ]
    return {
        "attention_grid": lambda p: viz.attention_grid(maps["encoder"], tokens, path=p),
        "seq2seq_attention": lambda p: viz.seq2seq_attention(s2s_maps, list("3456"), list("B6543"), path=p),
        "classifier_attention": lambda p: viz.classifier_attention(
            [0.2, 0.7, 0.1], ["a", "b", "c"], maps["encoder"], tokens, path=p
        ),
        "causal_vs_bidirectional": lambda p: viz.causal_vs_bidirectional(q, k, tokens, path=p),
        "attention_steps": lambda p: viz.attention_steps(q, k, v, tokens, path=p),
        "sinusoidal_encoding": lambda p: viz.sinusoidal_encoding(32, 16, path=p),
        "learned_positions": lambda p: viz.learned_positions(pos, path=p),
        "position_similarity": lambda p: viz.position_similarity(pos, path=p),
        "embedding_norms": lambda p: viz.embedding_norms(tok, pos, ids, tokens, path=p),
        "embedding_pca": lambda p: viz.embedding_pca(tok, pos, ids, tokens, path=p),
        "residual_norms": lambda p: viz.residual_norms(tr, path=p),
        "residual_heatmap": lambda p: viz.residual_heatmap(tr, tokens, path=p),
        "ff_activations": lambda p: viz.ff_activations(tr, layer=1, path=p),
        "layernorm_histograms": lambda p: viz.layernorm_histograms(tr, 0, path=p),
        "activation_functions": lambda p: viz.activation_functions(path=p),
        "softmax_temperatures": lambda p: viz.softmax_temperatures(path=p),
        "training_curves": lambda p: viz.training_curves(rows, path=p),
        "token_ids": lambda p: viz.token_ids(ids, tokens, path=p),
        "attention_bars": lambda p: viz.attention_bars(maps["encoder"][0, 0], tokens, path=p),
        "residual_variance": lambda p: viz.residual_variance(
            tr.residual[0], tr.attn_update[0], tokens, path=p
        ),
        "ff_scatter": lambda p: viz.ff_scatter(tr.layernorms[1][2], tr.ff_update[0], path=p),
        "backward_walkthrough": lambda p: viz.backward_walkthrough(
            viz.backward_steps(gpt, ids[None, :-1], ids[None, 1:]), path=p
        ),
    }


def test_every_figure_writes_a_png_of_its_size(gpt, ids, tmp_path):
    calls = _figure_calls(gpt, ids)
    public = {
        n
        for n in viz.__all__
        if n
        not in (
            "trace",
            "decode_attention",
            "encode_attention",
            "notebook_iframe",
            "write_report",
            "report",
            "report_bert",
            "backward_steps",
            "backward_table",
        )
    }  # data and text, not figures
    assert public == set(calls), "a figure function without a test (or a test without a function)"
    for name, call in calls.items():
        path = tmp_path / f"{name}.png"
        fig = call(path)
        w, h = fig.get_size_inches() * fig.dpi
        assert path.stat().st_size > 2000, name
        assert png_size(path) == (round(w), round(h)), name
        assert not list(tmp_path.glob("*.tmp")), "a temporary file was left behind"


def test_heatmap_draws_the_weights_the_model_returned(gpt, ids):
    fig = viz.attention_grid(T.attention_maps(gpt, ids)["encoder"], list(TEXT))
    # the weights the model kept, read straight from its attention modules
    model_w = [blk.self_attn.attn_weights[0] for blk in gpt.h]  # (H, T, T) each
    axes = [ax for ax in fig.axes if ax.images and ax.get_title().startswith("layer")]
    assert len(axes) == 4
    for ax in axes:
        layer, head = (int(x) for x in re.findall(r"\d+", ax.get_title()))
        drawn = np.asarray(ax.images[0].get_array())
        np.testing.assert_allclose(drawn, model_w[layer][head], rtol=0, atol=1e-7)
    # token labels on the outer panels: keys along the bottom row, queries down the left column
    assert [t.get_text() for t in axes[2].get_xticklabels()] == list(TEXT.replace(" ", "\u2423"))
    assert [t.get_text() for t in axes[2].get_yticklabels()] == list(TEXT.replace(" ", "\u2423"))
    assert axes[1].get_xticklabels() == [] and axes[1].get_yticklabels() == []
    # short input: the value of each cell is written in it
    cell = next(t for t in axes[0].texts if t.get_position() == (0, 1))
    assert float(cell.get_text()) == pytest.approx(model_w[0][0][1, 0], abs=0.006)


def test_the_traced_head_reproduces_the_heads_weights(gpt, ids):
    head = T.trace(gpt, ids).head(layer=1, head=1)
    q, k, v = head["q"], head["k"], head["v"]
    w = attention_forward(q[None, None], k[None, None], v[None, None], causal=True)[1]["weights"]
    np.testing.assert_allclose(w[0, 0], T.attention_maps(gpt, ids)["encoder"][1, 1], atol=1e-6)
    np.testing.assert_allclose(head["pattern"], w[0, 0], atol=1e-6)
    np.testing.assert_allclose(head["out"], w[0, 0] @ v, atol=1e-6)
    causal = np.tril(np.ones(w.shape[-2:], bool))  # the future keys hold -inf
    np.testing.assert_allclose(
        head["scores"], np.where(causal, q @ k.T / np.sqrt(q.shape[-1]), -np.inf), atol=1e-5
    )


def test_trace_reproduces_the_forward(gpt, ids):
    tr = T.trace(gpt, ids)
    logits, _ = gpt(ids[None])
    np.testing.assert_allclose(tr.output @ gpt.wte.weight.data.T, logits, atol=1e-5)
    assert len(tr.residual) == 3 and len(tr.ff_pre) == 2 and tr.ff_pre[0].shape == (1, len(TEXT), 64)
    s2s = tiny_seq2seq()
    src = np.array([[3, 4, 5, 6]])
    np.testing.assert_allclose(T.trace(s2s, src, [[1, 6]]).output, s2s.encode(src), atol=1e-5)
    clf = tiny_classifier(pooling="mean")
    clf.eval()
    logits, _ = clf(ids[None])
    out = T.trace(clf, ids).output
    np.testing.assert_allclose(clf.head(out.mean(axis=1)), logits, atol=1e-5)
    manual_seed(3)  # post-norm blocks (BERT)
    bert = BertEncoder(
        BertConfig(
            vocab_size=30,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=16,
        )
    )
    np.testing.assert_allclose(T.trace(bert, ids).output, bert(ids[None]), atol=1e-5)


def test_training_curves_tolerate_missing_fields(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text(
        '{"step": 1, "train_loss": 3.0}\n\n{"step": 2, "val_loss": 2.9, "lr": 0.1}\n{"step": 3, "lr'
    )
    fig = viz.training_curves(tmp_path)  # a torn last line (a kill mid-write) is dropped
    loss_ax, lr_ax = fig.axes  # gradient norm and tokens/s were never logged: no empty panels
    assert [ln.get_label() for ln in loss_ax.lines] == ["train_loss", "val_loss"]
    assert list(lr_ax.lines[0].get_xdata()) == [2]
    with pytest.raises(DataError, match="training log not found"):
        viz.training_curves(tmp_path / "missing")


@pytest.mark.parametrize(
    "bad",
    [
        'not json\n{"step": 2}\n',
        '{"step": "1", "lr": 0.1}\n{"step": 2}\n',
        '{"step": null}\n{"step": 2}\n',
        '{"step": [1]}\n{"step": 2}\n',
    ],
)
def test_training_curves_refuse_a_log_resume_refuses(tmp_path, bad):
    (tmp_path / "log.jsonl").write_text(bad)  # viz reads logs with the trainer's strict reader
    with pytest.raises(RunFileError, match="log.jsonl line 1"):
        viz.training_curves(tmp_path)


def test_bad_input_is_a_clear_error(gpt):
    with pytest.raises(ShapeError, match=r"\(n_layer, n_head, Tq, Tk\)"):
        viz.attention_grid(np.zeros((3, 3)), list("abc"))
    with pytest.raises(DataError, match="needs an input"):
        viz.report(gpt, "unused")
    with pytest.raises(DataError, match="tokenizer"):
        viz.report(gpt, "unused", text="abc")
    with pytest.raises(DataError, match="one label per id"):
        viz.report(gpt, "unused", ids=[1, 2], tokens=["a"])
    with pytest.raises(DataError, match="unknown figures"):
        viz.report(gpt, "unused", ids=[1, 2], only=["attention"])


def test_attention_encoding_round_trips():
    w = np.random.default_rng(0).dirichlet(np.ones(7), size=(2, 3, 7))  # (2, 3, 7, 7)
    back = viz.decode_attention(viz.encode_attention(w), w.shape)
    assert np.abs(back - w).max() <= 0.5 / 255 + 1e-7
