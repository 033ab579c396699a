"""The one lens report (scratchformer.lens.report), which `scratchformer lens` prints and
report.html draws: what applies to each model is asked of the model and its example, and every
analysis it runs prints a check that holds."""

from __future__ import annotations

import numpy as np
import pytest

from scratchformer.interop.bert import BertConfig, BertEncoder
from scratchformer.lens.report import lens_report
from scratchformer.models import GPT, GPTConfig
from scratchformer.models.classifier import ClassifierConfig, TransformerClassifier
from scratchformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

IDS = np.array([1, 4, 2, 7, 3, 5])
ALL = ("logit_lens", "attribution", "ablation", "saliency", "integrated_gradients", "head_scores")


def _models():
    small = dict(n_head=2, n_embd=8)
    yield "gpt", GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, dtype="float64", **small), seed=0), ALL
    post = GPT(
        GPTConfig(vocab_size=11, block_size=8, n_layer=1, norm_first=False, dtype="float64", **small), seed=0
    )
    yield "post-norm gpt", post, tuple(a for a in ALL if a != "attribution")  # the stream is no sum
    clf = TransformerClassifier(ClassifierConfig(vocab_size=11, n_classes=3, n_layer=1, **small), seed=0)
    yield "classifier", clf.to(np.float64), ALL[2:]
    s2s = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=11, tgt_vocab_size=11, n_layer=1, **small), seed=0)
    yield "seq2seq", s2s.to(np.float64), ALL
    bert = BertEncoder(
        BertConfig(
            vocab_size=11, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
        ),
        dtype=np.float64,
    )
    yield "bert", bert, ("head_scores",)  # no logits, no loss


@pytest.mark.parametrize("name, model, runs", list(_models()), ids=[m[0] for m in _models()])
def test_each_model_gets_the_analyses_that_apply_and_each_check_holds(name, model, runs):
    r = lens_report(
        model, model.example(IDS), corrupt=np.array([[1, 4, 2, 7, 3, 6]]) if name == "gpt" else None
    )
    assert tuple(a for a in ALL if getattr(r, a) is not None) == runs
    assert (r.patching is not None) == (name == "gpt")
    assert len(r.checks) == len(runs) + (name == "gpt") and all(c.endswith(" ok") for c in r.checks), r.checks
    if r.saliency is not None:  # the prediction at the last position is what is explained
        out = model.eval()(*model.example(IDS).explained)[0]
        assert r.target == int((out[0, -1] if out.ndim == 3 else out[0]).argmax())
