"""One contract across the model families (models/base.py): GPT, TransformerClassifier,
Seq2SeqTransformer and the BERT encoder take the same backward(dloss=1.0, grad_output=None),
with the same meaning; one ignore index; viz finds a model's family by type."""

import inspect

import numpy as np
import pytest
from tiny_run import tiny

from scratchformer.errors import BackwardError, ConfigError, DataError, DTypeError, ShapeError
from scratchformer.gradcheck import gradcheck
from scratchformer.interop import BertConfig
from scratchformer.interop.bert import BertEncoder
from scratchformer.models import (
    GPT,
    ClassifierConfig,
    GPTConfig,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    TransformerClassifier,
)
from scratchformer.models.base import Model
from scratchformer.nn import manual_seed
from scratchformer.ops import IGNORE_INDEX

RNG = np.random.default_rng(0)


def families():
    """(name, model in float64, inputs, targets) for each family with a loss."""
    manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=7, block_size=6, n_layer=1, n_head=2, n_embd=8, dtype="float64"), seed=0)
    clf = TransformerClassifier(
        ClassifierConfig(vocab_size=7, n_classes=3, n_layer=1, n_head=2, n_embd=8)
    ).to(np.float64)
    s2s = Seq2SeqTransformer(
        Seq2SeqConfig(src_vocab_size=7, tgt_vocab_size=7, n_layer=1, n_head=2, n_embd=8)
    ).to(np.float64)
    ids = RNG.integers(1, 7, (2, 5))
    yield "gpt", gpt, (ids,), RNG.integers(0, 7, (2, 5))
    yield "classifier", clf, (ids,), RNG.integers(0, 3, 2)
    yield "seq2seq", s2s, (ids, RNG.integers(1, 7, (2, 4))), RNG.integers(1, 7, (2, 4))


def grads(model):
    return np.concatenate([p.grad.ravel() for p in model.parameters()])


def test_every_family_has_the_same_backward_signature():
    from scratchformer.interop.bert_classifier import BertClassifier

    families = (GPT, TransformerClassifier, Seq2SeqTransformer, BertEncoder, BertClassifier)
    signatures = {cls.__name__: inspect.signature(cls.backward) for cls in families}
    assert all(issubclass(cls, Model) for cls in families)
    want = inspect.signature(Model.backward)
    assert {name: str(sig) for name, sig in signatures.items()} == {name: str(want) for name in signatures}


@pytest.mark.parametrize("name,model,inputs,targets", list(families()), ids=[f[0] for f in families()])
def test_backward_means_the_same_on_every_family(name, model, inputs, targets):
    # backward(dloss) after a forward with targets == backward(grad_output=d loss/d output) * dloss
    model.zero_grad()
    logits, loss = model(*inputs, targets)
    assert model.loss_terms(*inputs, targets) == targets.size
    model.backward(dloss=0.5)
    by_loss = grads(model)
    from scratchformer.ops import cross_entropy_backward, cross_entropy_forward

    t = np.where(targets == getattr(model.config, "pad_id", None), IGNORE_INDEX, targets)
    dlogits = cross_entropy_backward(cross_entropy_forward(logits, t)[1])
    model.zero_grad()
    out, no_loss = model(*inputs)  # no targets: an output gradient is enough
    assert no_loss is None
    model.backward(dloss=0.5, grad_output=dlogits)
    np.testing.assert_allclose(grads(model), by_loss, rtol=1e-12, atol=1e-15)
    model(*inputs)
    with pytest.raises(BackwardError, match="needs a forward with"):
        model.backward()  # no loss and no output gradient
    model(*inputs)
    with pytest.raises(ShapeError, match="grad_output"):
        model.backward(grad_output=dlogits[:1])
    model(*inputs, targets)
    for bad in ("1", np.ones(3), float("nan")):
        with pytest.raises((DTypeError, ConfigError), match="dloss"):
            model.backward(dloss=bad)
    model.backward()  # a refused call left the forward for a correct one


def test_the_bert_encoder_takes_its_output_gradient_and_passes_gradcheck():
    cfg = BertConfig(
        vocab_size=11,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=8,
    )
    model = BertEncoder(cfg, dtype=np.float64).train()
    ids = RNG.integers(1, 11, (2, 5))  # no [PAD] (id 0): its row is never trained, as HF's padding_idx
    model(ids)
    with pytest.raises(BackwardError, match="needs grad_output"):
        model.backward()
    report = gradcheck(model, ids)
    assert report.max_error < 1e-5, report


def test_one_ignore_index_everywhere():
    assert IGNORE_INDEX == -100
    from scratchformer.data import IGNORE_INDEX as data_ignore
    from scratchformer.ops.loss import cross_entropy_forward

    assert data_ignore == IGNORE_INDEX
    assert inspect.signature(cross_entropy_forward).parameters["ignore_index"].default == IGNORE_INDEX
    for name, model, inputs, targets in families():  # noqa: B007
        targets = targets.copy()
        targets.flat[0] = -1  # not the ignore index: refused, never silently skipped
        with pytest.raises(DataError, match="outside"):
            model(*inputs, targets)


def test_viz_finds_the_family_by_type_so_a_subclass_is_drawn():
    from scratchformer.viz import trace

    class MyGPT(GPT):
        pass

    model = MyGPT(GPTConfig(vocab_size=7, block_size=6, n_layer=1, n_head=2, n_embd=8), seed=0)
    assert trace.blocks(model) is model.h
    assert trace.trace(model, np.array([1, 2, 3])) is not None
    with pytest.raises(ConfigError, match="or subclasses"):
        trace.blocks(object())


# -- the contract the tools ask (models/base.py): lens, viz, limits, init-from runs -------------
LLAMA_BLOCKS = dict(
    positional="rope",
    normalization="rmsnorm",
    activation="swiglu",
    bias=False,
    n_kv_head=1,
    tie_weights=False,
)
TINY_RUN = [*tiny(batch_size=4, eval_batches=1), "--max-steps", "2", "--workers", "1", "--num-samples", "0"]


def _llama_gpt(cls=GPT, dtype="float64"):
    return cls(
        GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=4, n_embd=16, dtype=dtype, **LLAMA_BLOCKS),
        seed=0,
    )


def test_every_family_answers_the_contract():
    """Each family's parts, asked of the model: stacks, block parts, final norm and its kind,
    unembedding, position table (None with rotary positions), parameter count."""
    from scratchformer.interop.bert_classifier import BertClassifier, SentenceClassifierConfig

    cfg = SentenceClassifierConfig(
        vocab_size=20,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        labels=["a", "b"],
        max_position_embeddings=16,
        max_length=8,
    )
    bert_clf = BertClassifier(BertEncoder(cfg.bert_config()), 2)
    models = [m for _, m, _, _ in families()] + [_llama_gpt(), bert_clf.encoder, bert_clf]
    expected = {
        "gpt": [""],
        "classifier": [""],
        "seq2seq": ["encoder.", "decoder."],
        "bert": [""],
        "sentence_classifier": ["encoder."],
    }
    for model in models:
        assert list(model.stacks()) == expected[model.family], model.family
        config = cfg if model is bert_clf else model.config
        assert type(model).param_count(config) == model.num_parameters(), model.family
        for prefix, blocks in model.stacks().items():
            parts = model.block_parts(blocks[0])
            assert list(parts.attentions)[0] == "attn" and parts.feedforward is not None
            assert model.final_norm_kind(prefix) in (None, "layernorm", "rmsnorm")
        assert model.token_table().shape[1] == next(iter(model.stacks().values()))[0].ff.fc2.weight.shape[0]
    llama = models[3]
    assert llama.final_norm_kind() == "rmsnorm" and llama.position_table() is None
    assert llama.unembedding().weight.shape == (11, 16)
    assert models[0].final_norm_kind() == "layernorm" and models[0].position_table().shape == (6, 8)
    assert models[1].unembedding() is None and models[2].unembedding().prefix == "decoder."


def test_beam_search_asks_the_model_for_its_decoding_sizes():
    """The beam's memory comes from the model's decoding_sizes(); a model without the
    encoder-decoder decoding API is refused in one line, not an AttributeError."""
    from scratchformer.inference.beam import beam_bytes, check_beam_width, greedy_decode

    _, gpt, _, _ = next(families())
    s2s = [m for name, m, _, _ in families() if name == "seq2seq"][0]
    small, wide = beam_bytes(s2s, 1, 2, 5, 5), beam_bytes(s2s, 1, 4, 5, 5)
    assert wide == 2 * small > 0
    for call in (lambda: check_beam_width(2, gpt), lambda: greedy_decode(gpt, np.array([[1, 2]]))):
        with pytest.raises(ConfigError, match="encoder-decoder"):
            call()


def test_the_lens_studies_a_subclass_of_gpt_as_a_gpt():
    """No class-name strings: `class MyGPT(GPT)` has the GPT's hook names and analyses."""
    from scratchformer import lens
    from scratchformer.lens.hooks import hook_names

    class MyGPT(GPT):
        pass

    base, sub = _llama_gpt(), _llama_gpt(MyGPT)
    assert hook_names(sub) == hook_names(base) and "blocks.1.mlp.post" in hook_names(sub)
    ids = np.array([[1, 2, 3, 4, 5]])
    assert lens.logit_lens(sub, (ids,)).check.ok
    assert lens.direct_logit_attribution(sub, (ids,), token=3).check.ok
    assert lens.head_ablation(sub, (ids[:, :-1], ids[:, 1:])).check.ok


@pytest.mark.parametrize("kw", [LLAMA_BLOCKS, dict(normalization="rmsnorm"), dict(positional="sinusoidal")])
def test_logit_attribution_goes_through_the_models_own_final_norm(kw):
    """The parts, each through the final norm with its scale frozen at the final residual,
    equal an independent computation: the scale read off the model's own ln_final output, the
    parts read off the cache. On a rotary model there is no pos_embed part (the old code raised
    KeyError) and on an RMSNorm model no centring (the old code's LayerNorm formula was off)."""
    from scratchformer import lens

    model = GPT(
        GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=4, n_embd=16, dtype="float64", **kw), seed=1
    )
    for p in model.parameters():  # a norm weight away from 1 and a residual with a mean
        p.data += 0.05 * np.random.default_rng(2).standard_normal(p.shape)
    ids, token, pos = np.array([[1, 2, 3, 4, 5, 6]]), 7, 3
    dla = lens.direct_logit_attribution(model, (ids,), token=token, position=pos)
    assert dla.check.ok and dla.check.error < 1e-10
    assert ("pos_embed" in dla.labels) == (model.position_table() is not None)

    (logits, _), cache = lens.run_with_cache(model, ids)
    x = cache["blocks.1.resid_post"][0, pos]
    gamma = model.ln_f.weight.data
    normed = cache["ln_final"][0, pos]
    if kw.get("normalization") == "rmsnorm":
        scale = x * gamma / normed  # = sqrt(mean(x^2) + eps) in every channel
        expect = lambda c: (c * gamma / scale) @ model.lm_head.weight.data[token]  # noqa: E731
        bias = 0.0
    else:
        beta = model.ln_f.bias.data
        scale = (x - x.mean()) * gamma / (normed - beta)
        expect = lambda c: ((c - c.mean()) * gamma / scale) @ model.lm_head.weight.data[token]  # noqa: E731
        bias = float(beta @ model.lm_head.weight.data[token])
    np.testing.assert_allclose(scale, scale[0], rtol=1e-9)
    assert dla.labels[0] == "embed"
    np.testing.assert_allclose(dla.contributions[0], expect(cache["embed"][0, pos]), rtol=1e-9, atol=1e-12)
    mlp = dla.labels.index("L1 mlp")
    np.testing.assert_allclose(
        dla.contributions[mlp], expect(cache["blocks.1.mlp.out"][0, pos]), rtol=1e-9, atol=1e-12
    )
    np.testing.assert_allclose(dla.bias, bias, atol=1e-12)
    np.testing.assert_allclose(dla.contributions.sum() + dla.bias, logits[0, pos, token], rtol=1e-10)


def test_viz_draws_a_subclass_and_a_rotary_models_initial_weights(tmp_path):
    """compare-init on a model with no position table: the position figures are left out, the
    rest drawn (the old code drew a table RoPE does not have and raised)."""
    from scratchformer.viz import report

    class MyGPT(GPT):
        pass

    model, init = _llama_gpt(MyGPT, "float32"), _llama_gpt(MyGPT, "float32")
    paths = report(
        model,
        tmp_path,
        ids=np.array([1, 2, 3, 4]),
        tokens=list("abcd"),
        init_model=init,
        only=["attention_grid", "residual_norms"],
    )
    written = {p.stem for p in paths}
    assert {"attention_grid_init", "residual_norms_init"} <= written
    assert not any(s.startswith(("position", "embedding_pca")) for s in written)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A tiny Llama-architecture directory written by scratchformer's own save_hf_llama, with a
    small BPE (vocab.json + merges.txt) of the model's vocabulary size."""
    pytest.importorskip("tokenizers")
    from scratchformer.data.bpe import BPETokenizer
    from scratchformer.interop.llama import save_hf_llama

    root = tmp_path_factory.mktemp("llama")
    text = root / "story.txt"
    text.write_text("the cat sat on the mat and the dog ran to the log. " * 60, encoding="utf-8")
    path = root / "llama"
    path.mkdir()
    tok = BPETokenizer.train([text.read_text()], 280)
    tok._tok.model.save(str(path))
    model = GPT(
        GPTConfig(
            vocab_size=tok.vocab_size,
            block_size=32,
            n_layer=2,
            n_head=4,
            n_embd=16,
            **{**LLAMA_BLOCKS, "n_kv_head": 2},
        ),
        seed=3,
    )
    save_hf_llama(model, path)
    return path, text


def test_init_from_a_llama_directory_then_sample_resume_viz_and_lens(llama_dir, tmp_path, capsys):
    """case 1: the run's config.json now counts SwiGLU's third matrix and grouped-query heads,
    so sample and --resume read the run (before: 'the files do not belong together');
    --compare-init draws the directory's weights, the run's real start, and says so; the lens
    explains a rotary RMSNorm model."""
    from scratchformer.cli.main import main
    from scratchformer.cli.viz import _initial_model
    from scratchformer.interop.llama import load_hf_llama
    from scratchformer.training.jobs import load_job

    path, text = llama_dir
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--init-from",
                str(path),
                "--data",
                str(text),
                "--format",
                "text",
                "--block-size",
                "16",
                "--max-steps",
                "2",
                "--eval-interval",
                "2",
                "--batch-size",
                "4",
                "--no-progress",
                "--quiet",
                "--workers",
                "1",
                "--num-samples",
                "0",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(["sample", str(run), "-n", "1", "--seed", "0", "--prompt", "the cat", "--max-new-tokens", "4"])
        == 0
    )
    assert "the cat" in capsys.readouterr().out
    assert (
        main(
            [
                "train",
                "--resume",
                "--out",
                str(run),
                "--max-steps",
                "3",
                "--no-progress",
                "--quiet",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    job = load_job(run)
    initial, source = _initial_model(run, job)
    assert source is not None and str(path.resolve()) in source
    start = load_hf_llama(path).state_dict()
    for name, value in initial.state_dict().items():
        np.testing.assert_array_equal(value, start[name], err_msg=name)
    figs = tmp_path / "figs"
    assert main(["viz", str(run), "--text", "the cat", "--compare-init", "--out", str(figs)]) == 0
    assert (figs / "attention_grid_init.png").is_file() and not (figs / "positions_learned_init.png").exists()
    capsys.readouterr()
    assert main(["lens", str(run), "--text", "the cat", "--json"]) == 0
    out = capsys.readouterr().out
    assert "attribution" in out and "FAILED" not in out


def test_compare_init_says_in_one_line_when_the_initial_weights_are_gone(llama_dir, tmp_path, capsys):
    """Never random weights labelled as the run's initial ones: a run whose --init-from
    directory is gone has none to draw, and says so (exit 2)."""
    import shutil

    from scratchformer.cli.main import main

    path, text = llama_dir
    moved = tmp_path / "llama"
    shutil.copytree(path, moved)
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--init-from",
                str(moved),
                "--data",
                str(text),
                "--format",
                "text",
                "--block-size",
                "16",
                "--max-steps",
                "1",
                "--eval-interval",
                "1",
                "--batch-size",
                "4",
                "--no-progress",
                "--quiet",
                "--workers",
                "1",
                "--num-samples",
                "0",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    shutil.rmtree(moved)
    capsys.readouterr()
    assert (
        main(["viz", str(run), "--text", "the cat", "--compare-init", "--out", str(tmp_path / "figs")]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no initial weights" in err and "Traceback" not in err


def test_lens_reads_a_hugging_face_directory(llama_dir, capsys):
    """case 5: `lens --hf DIR` explains a Llama directory (rotary, RMSNorm) with every check ok;
    the directory given as a run is refused in one line that names --hf."""
    from scratchformer.cli.main import main

    path, _ = llama_dir
    assert main(["lens", "--hf", str(path), "--text", "the cat sat", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"attribution"' in out and "FAILED" not in out and out.count(" ok") >= 4
    assert main(["lens", str(path), "--text", "the cat"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"lens --hf {path}" in err


def test_no_tool_maps_a_family_to_attribute_names():
    """Family knowledge lives on the model classes: outside models/, interop/ and nn/ no file
    names a model's attributes (lm_head, ln_f, a GPT's h, ...) or compares class names."""
    import re
    from pathlib import Path

    import scratchformer

    root = Path(scratchformer.__file__).parent
    patterns = [
        r"type\([^)]*\)\.__name__\s*(==|!=|in\b)",
        r"\.__name__\s*(==|!=)\s*[\"']",
        r"[\"'](lm_head|ln_f|wte|wpe|tok_emb|src_emb|tgt_emb|enc_norm|dec_norm|word_embeddings)[\"']",
        r"\.(lm_head|ln_f|wte|wpe|tok_emb|src_emb|tgt_emb|enc_norm|dec_norm|word_embeddings)\b",
        r"\bmodel\.(h|blocks|layers)\b",
        r"[\"']h[\"']\s*:",
    ]
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in ("models", "interop", "nn", "exercises"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            if any(re.search(p, code) for p in patterns):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_every_family_gives_its_example():
    """Model.example: the forward's inputs, one loss's inputs (whose loss the model computes),
    what the lens explains, and the labels of each stack's positions and of the output."""
    from scratchformer.interop.bert_classifier import BertClassifier

    (_, gpt, _, _), (_, clf, _, _), (_, s2s, _, _) = families()
    ids = np.array([1, 2, 3, 4, 5, 6, 1, 2])  # longer than the GPT's block of 6
    ex = gpt.example(ids, list("abcdefgh"))
    assert np.array_equal(ex.inputs[0], ids[None, -6:]) and ex.tokens == {"": list("cdefgh")}
    assert ex.positions == list("cdefgh") and ex.output_labels == [str(i) for i in range(7)]
    assert np.array_equal(ex.loss_inputs[1], ids[None, -5:]) and ex.target is None
    assert gpt.example(ids[:1]).loss_inputs is None  # one token predicts nothing
    ex = clf_ex = clf.example(ids[:5], class_names=["x", "y", "z"])
    assert ex.target == int(clf.eval()(ids[None, :5])[0].argmax()) and ex.output_labels == ["x", "y", "z"]
    assert np.array_equal(ex.loss_inputs[1], [ex.target]) and ex.positions is None
    assert clf.example(ids[:5], target=2).loss_inputs[1].tolist() == [2]
    ex = s2s.example(ids[:5], vocab_labels=list("ABCDEFG"))
    src, dec = ex.inputs  # the source, and BOS + the model's own greedy answer
    assert dec[0, 0] == s2s.config.bos_id and ex.tokens["decoder."] == [list("ABCDEFG")[i] for i in dec[0]]
    assert np.array_equal(ex.explained[1], dec[:, :-1]) and np.array_equal(ex.loss_inputs[2], dec[:, 1:])
    assert ex.positions == ex.tokens["decoder."][:-1] and ex.answer == ex.tokens["decoder."][1:]
    bert = BertEncoder(
        BertConfig(
            vocab_size=9, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
        )
    )
    assert bert.example(ids[:4]).loss_inputs is None and bert.example(ids[:4]).output_labels is None
    ex = BertClassifier(bert, 2).example(ids[:4], target=1)
    assert ex.loss_inputs[1] is None and ex.loss_inputs[2].tolist() == [1]  # no attention mask, then labels
    assert ex.tokens == {"encoder.": [str(i) for i in ids[:4]]}
    for model, inputs in ((clf, clf_ex.loss_inputs), (gpt, gpt.example(ids).loss_inputs)):
        assert model.eval()(*inputs)[1] is not None  # a loss
    with pytest.raises(DataError, match="one label per id"):
        gpt.example(ids, ["a"])
