"""One contract across the model families (models/base.py): GPT, TransformerClassifier,
Seq2SeqTransformer and the BERT encoder take the same backward(dloss=1.0, grad_output=None),
with the same meaning; one ignore index; viz finds a model's family by type."""

import inspect

import numpy as np
import pytest

from scratchformer.errors import BackwardError, ConfigError, DataError, DTypeError, ShapeError
from scratchformer.gradcheck import gradcheck
from scratchformer.interop import BertConfig
from scratchformer.interop.bert import BertEncoder
from scratchformer.models import (GPT, ClassifierConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer,
                                  TransformerClassifier)
from scratchformer.models.base import Model
from scratchformer.nn import manual_seed
from scratchformer.ops import IGNORE_INDEX

RNG = np.random.default_rng(0)


def families():
    """(name, model in float64, inputs, targets) for each family with a loss."""
    manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=7, block_size=6, n_layer=1, n_head=2, n_embd=8, dtype="float64"), seed=0)
    clf = TransformerClassifier(ClassifierConfig(vocab_size=7, n_classes=3, n_layer=1, n_head=2, n_embd=8)).to(
        np.float64)
    s2s = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=7, tgt_vocab_size=7, n_layer=1, n_head=2, n_embd=8)).to(
        np.float64)
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
    assert model.loss_count() == targets.size
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
    cfg = BertConfig(vocab_size=11, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=16, max_position_embeddings=8)
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
    for name, model, inputs, targets in families():
        targets = targets.copy()
        targets.flat[0] = -1  # not the ignore index: refused, never silently skipped
        with pytest.raises(DataError, match="outside"):
            model(*inputs, targets)


def test_viz_finds_the_family_by_type_so_a_subclass_is_drawn():
    from scratchformer.viz import trace

    class MyGPT(GPT):
        pass

    model = MyGPT(GPTConfig(vocab_size=7, block_size=6, n_layer=1, n_head=2, n_embd=8), seed=0)
    assert trace.kind(model) == "gpt"
    assert trace.blocks(model) is model.h
    assert trace.trace(model, np.array([1, 2, 3])) is not None
    with pytest.raises(ConfigError, match="or subclasses"):
        trace.kind(object())
