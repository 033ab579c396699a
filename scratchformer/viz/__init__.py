"""scratchformer.viz: the tutorials' figures drawn from a real model, and report.html.

One function per figure; each takes arrays (or a `trace.Trace`) and returns a matplotlib
Figure, saving a PNG when given `path=`. `report(...)` draws them all for one model and input
and writes report.html (self-contained, with the interactive attention explorer).
matplotlib is imported only when a figure is drawn (Agg canvas, no pyplot).

Reading a model: `scratchformer.viz.trace`, which is `scratchformer.lens.trace` (`attention_maps`
and `trace`, read through the hook points of one forward of the model, and the accessors that
ask each model's contract), kept below `training` because the training diagnostics read models
with it too.
"""

from scratchformer.lens import trace
from scratchformer.viz.attention import (
    attention_grid,
    attention_steps,
    causal_vs_bidirectional,
    classifier_attention,
    seq2seq_attention,
)
from scratchformer.viz.backward import backward_steps, backward_table, backward_walkthrough
from scratchformer.viz.basics import activation_functions, softmax_temperatures, training_curves
from scratchformer.viz.bundle import report, report_bert
from scratchformer.viz.closeups import attention_bars, ff_scatter, residual_variance, token_ids
from scratchformer.viz.embeddings import (
    embedding_norms,
    embedding_pca,
    learned_positions,
    position_similarity,
    sinusoidal_encoding,
)
from scratchformer.viz.html import decode_attention, encode_attention, notebook_iframe, write_report
from scratchformer.viz.internals import ff_activations, layernorm_histograms, residual_heatmap, residual_norms

__all__ = [
    "trace",
    "attention_grid",
    "attention_steps",
    "causal_vs_bidirectional",
    "classifier_attention",
    "seq2seq_attention",
    "activation_functions",
    "softmax_temperatures",
    "training_curves",
    "embedding_norms",
    "embedding_pca",
    "learned_positions",
    "position_similarity",
    "sinusoidal_encoding",
    "decode_attention",
    "encode_attention",
    "notebook_iframe",
    "write_report",
    "ff_activations",
    "layernorm_histograms",
    "residual_heatmap",
    "residual_norms",
    "report",
    "report_bert",
    "backward_steps",
    "backward_table",
    "backward_walkthrough",
    "token_ids",
    "attention_bars",
    "residual_variance",
    "ff_scatter",
]
