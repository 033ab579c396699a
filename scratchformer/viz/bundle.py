"""Every figure for one model and one input, as PNGs plus report.html: `report(...)`.

    paths = viz.report(gpt, "figs/", text="emma", tokenizer=tok, log="runs/names")
    paths = viz.report_bert("figs/", "A sentence.")       # the installed all-MiniLM-L6-v2

The CLI's `viz` command is meant to be a thin wrapper: load a checkpoint, call `report`,
print the paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scratchformer.errors import DataError
from scratchformer.runfiles import write_atomic
from scratchformer.viz import attention as A
from scratchformer.viz import backward as BW
from scratchformer.viz import basics as B
from scratchformer.viz import closeups as C
from scratchformer.viz import diagnostics as D
from scratchformer.viz import embeddings as E
from scratchformer.viz import features as FE
from scratchformer.viz import induction as IND
from scratchformer.viz import internals as I
from scratchformer.viz import lens as LF
from scratchformer.viz import trace as T
from scratchformer.viz._plot import finish
from scratchformer.viz.html import diag_frame, write_report

__all__ = ["report", "report_bert"]


def _summary(rows: list[dict]) -> dict:
    """A few numbers from a run's log rows (fields that are missing are left out)."""

    def last(key):
        vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return vals[-1] if vals else None

    vals = [r["val_loss"] for r in rows if isinstance(r.get("val_loss"), (int, float))]
    out = {
        "steps": last("step"),
        "last train loss": last("train_loss"),
        "last val loss": last("val_loss"),
        "best val loss": min(vals) if vals else None,
        "tokens/s": last("tokens_per_s"),
    }
    return {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in out.items() if v is not None}


def _prepare(ids, tokens, text, tokenizer):
    """The input as ids (T,) and a label per id (the model's `example` checks them)."""
    if text is not None:
        if tokenizer is None:
            raise DataError("report(text=...) needs the tokenizer that turns it into ids (tokenizer=...)")
        ids = tokenizer.encode(text)
        tokens = list(text) if tokens is None else tokens
    if ids is None:
        raise DataError("report needs an input: text= (with tokenizer=) or ids=")
    ids = np.asarray(ids, dtype=np.int64).ravel()
    if ids.size == 0:
        raise DataError("report needs a non-empty input")
    return ids, tokens


DIAGNOSTICS_FIGURES = (
    "diag_activations",
    "diag_activation_gradients",
    "diag_gradients",
    "diag_update_ratio",
    "diag_saturation",
    "diag_induction",
    "grokking",
)  # diagnostics.jsonl
FIGURES = (
    "attention_seq2seq",
    "attention_grid",
    "classifier_attention",
    "causal_vs_bidirectional",
    "attention_steps",
    "positions_learned",
    "positions_sinusoidal",
    "position_similarity",
    "embedding_norms",
    "embedding_pca",
    "residual_norms",
    "residual_heatmap",
    "ff_activations",
    "layernorm",
    "token_ids",
    "attention_bars",
    "residual_variance",
    "ff_scatter",
    "backward",
    "activations",
    "softmax_temperature",
    "training_curves",
    "lens",
    "sae_measures",
    *DIAGNOSTICS_FIGURES,
)


@dataclass
class _Input:
    """What every part of the report draws from: the model, its example (`Model.example`: the
    forward's inputs, the loss, the labels of each stack's positions) and one trace of it."""

    model: object
    example: object
    tokens: list  # a label per token of the main input (as the model reads it: a GPT's last block_size)
    vocab_labels: list | None
    trace: object  # trace.trace(model, *example.inputs): one hooked forward, read by every figure
    example_args: dict  # what `example` was made of, the true class apart
    true_class: int | None = None

    @property
    def ids(self) -> np.ndarray:
        return self.example.inputs[0][0]

    @property
    def maps(self) -> dict:
        return self.trace.maps

    @property
    def att_tokens(self) -> list:  # the labels of the main stack's positions ([CLS] first, when pooled so)
        return self.example.tokens[self.model.main_prefix()]

    def axes(self, key: str) -> tuple[list, list]:
        """The labels of the queries and the keys of attention map `key`: a self-attention's are
        its stack's positions; another attention reads the main stack's (cross-attention)."""
        layout = T.map_layout(self.model)[key]
        queries = self.example.tokens[layout.stack]
        return queries, queries if layout.attention == "attn" else self.att_tokens


def report(
    model,
    out_dir,
    ids=None,
    tokens=None,
    *,
    text=None,
    tokenizer=None,
    tgt_ids=None,
    tgt_tokens=None,
    class_names=None,
    vocab_labels=None,
    log=None,
    title=None,
    only=None,
    true_class=None,
    accuracy=None,
    token_ids=None,
    init_model=None,
    init_source=None,
    features=None,
) -> list[Path]:
    """Draw every figure that applies to `model` on one input; write them as PNGs and a
    self-contained report.html into out_dir. Returns the paths written (report.html last).

    The input: `text` with `tokenizer` (a CharTokenizer: tokens are the characters), or `ids`
    with optional `tokens` labels. seq2seq: `ids` is the source; `tgt_ids` the decoder input
    (default: BOS + the greedy decoding). classifier: `class_names` label the bars.
    vocab_labels: a label per vocabulary id (default: the tokenizer's characters).
    log: a run directory or log.jsonl for the training curves and summary (optional); when the run
    has a diagnostics.jsonl beside it, its figures and a "probe over training" tab with a step slider.
    only: names from `FIGURES` to draw (None: every figure that applies; "lens": the Lens part,
    the lens analyses' figures and check lines); the attention explorer is always written.
    classifier: `true_class` (the input's class) and `accuracy` (held-out) go in its title.
    token_ids: the vocabulary ids the model's data use (the embedding PCA shows only these).
    "backward": the backward walk-through (viz/backward.py), for models up to
    BACKWARD_MAX_PARAMETERS parameters: backward.png and backward.txt (its steps as text) beside
    the figures, and the report's interactive Backward part (not embedded as a figure).
    init_model: the run's initial weights (an untrained model of the same configuration and
    seed, or the pretrained model it started from): the attention grid, positions (when the
    model adds a position table), embedding PCA and residual stream are drawn for it too, as
    NAME_init.png beside each, so what training changed can be seen. init_source: what those
    weights are, for the titles and captions (None: untrained, same configuration and seed).
    features: a sparse autoencoder's feature pages (`SAEJob.viz_inputs`): the report's Features
    part (viz/features.py), and its measures over training ("sae_measures") from `log`, its run's.
    """
    T.blocks(model)  # a scratchformer model, or one clear error
    if only is not None and not set(only) <= set(FIGURES):
        raise DataError(f"unknown figures {sorted(set(only) - set(FIGURES))}: choose from {list(FIGURES)}")
    ids, tokens = _prepare(ids, tokens, text, tokenizer)
    out_dir = Path(out_dir)
    if vocab_labels is None and tokenizer is not None and hasattr(tokenizer, "decode"):
        vocab_labels = [tokenizer.decode([i]) or "<eot>" for i in range(tokenizer.vocab_size)]
    args = dict(ids=ids, tokens=tokens, vocab_labels=vocab_labels, tgt_ids=tgt_ids, tgt_tokens=tgt_tokens)
    args["class_names"] = class_names
    example = model.example(**args, target=true_class)
    main = example.inputs[0][0]  # the input as the model reads it (a GPT's last block_size tokens)
    tokens = [str(i) for i in ids][-len(main) :] if tokens is None else list(tokens)[-len(main) :]
    inp = _Input(model, example, tokens, vocab_labels, T.trace(model, *example.inputs), args, true_class)
    figures = []  # (file stem, title, caption, figure)

    def add(stem, title, caption, draw):  # draw: a function returning the Figure
        if only is None or stem.removesuffix("_init") in only:
            figures.append((stem, title, caption, draw()))

    _add_attention(add, inp, true_class, accuracy)
    _add_positions(add, inp, token_ids)
    _add_inside(add, inp)
    steps = _backward_steps(inp) if only is None or "backward" in only else None
    if steps is not None:
        add("backward", "Backward, step by step", "", lambda: BW.backward_walkthrough(steps))
    summary, diag_records = _add_training(add, log)
    if features is not None and log is not None:
        add(
            "sae_measures",
            "The autoencoder's measures over training",
            "SAELens's measures on the held-out split at each evaluation (docs/lens.md).",
            lambda: FE.sae_measures(B.log_rows(log)),
        )
    if init_model is not None:  # the same views of the untrained model
        _add_init_views(add, init_model, inp, token_ids, init_source)
    parts = [] if features is None else [FE.feature_part(features)]
    return _write(out_dir, inp, figures, steps, diag_records, summary, only, title, parts)


def _add_attention(add, inp: _Input, true_class, accuracy) -> None:
    """The attention figures."""
    model, maps, tokens, att_tokens, ex = inp.model, inp.maps, inp.tokens, inp.att_tokens, inp.example
    if "cross" in maps:  # an encoder-decoder: its three kinds of attention side by side
        add(
            "attention_seq2seq",
            "Encoder, decoder and cross attention",
            "Decoder self-attention is lower-triangular (causal); in cross-attention each target "
            "row shows which source tokens it reads: on a copy or reversal task, a diagonal.",
            lambda: A.seq2seq_attention(maps, tokens, inp.axes("cross")[0]),
        )
    add(
        "attention_grid",
        "Every layer and head",
        "Rows are queries, columns keys; each row sums to 1. Look for heads that attend to the "
        "previous token (a sub-diagonal), to the first token, or to identical tokens.",
        lambda: A.attention_grid(maps["encoder"], att_tokens, title=model.family),
    )
    if ex.positions is None and ex.output_labels is not None:  # one prediction per sequence: classes
        probs = T.class_probabilities(model, inp.ids)
        add(
            "classifier_attention",
            "Prediction beside the heads",
            "Which tokens the last layer's heads read when the model makes this prediction.",
            lambda: A.classifier_attention(
                probs, ex.output_labels, maps["encoder"], att_tokens, true_class=true_class, accuracy=accuracy
            ),
        )
    # one head of the first block, as the model's forward ran it
    head = inp.trace.head(layer=0, head=0)
    q, k, v = head["q"], head["k"], head["v"]
    n = min(len(q), 16)  # step-by-step figures stay legible on a short prefix
    bias = T.head_score_bias(model, inp.ids[:n], layer=0, head=0)  # ALiBi's, or None
    add(
        "causal_vs_bidirectional",
        "Causal against bidirectional",
        "The same scores under two masks: with the causal mask a token cannot see the future and "
        "its weights renormalise over the past.",
        lambda: A.causal_vs_bidirectional(q[:n], k[:n], att_tokens[:n], bias=bias),
    )
    add(
        "attention_steps",
        "One head step by step",
        "Scores, masked scores (future = -inf), softmax weights, and the output rows they mix.",
        lambda: A.attention_steps(
            q[:n], k[:n], v[:n], att_tokens[:n], causal=T.is_causal(model), layer=0, head=0, bias=bias
        ),
    )


def _add_positions(add, inp: _Input, token_ids) -> None:
    """Positions and embeddings."""
    model, ids, tokens = inp.model, inp.ids, inp.tokens
    table, tok = T.position_table(model), T.token_table(model)
    # rotary positions (table None) add nothing to the tokens: no table to draw
    if table is not None and T.learned_positions(model):
        add(
            "positions_learned",
            "Learned positions",
            "A learned table, position by dimension. The title compares neighbouring rows with distant "
            "ones: training often makes nearby positions alike, and an untrained table is noise.",
            lambda: E.learned_positions(table),
        )
    elif table is not None:
        add(
            "positions_sinusoidal",
            "Sinusoidal positions",
            "Each pair of columns is a sine/cosine wave; frequency falls from left to right.",
            lambda: E.sinusoidal_encoding(min(len(table), 128), table.shape[1]),
        )
    if table is not None:
        add(
            "position_similarity",
            "Position similarity",
            "Cosine similarity of position vectors; the title says, from the numbers, whether it falls "
            "with distance (sinusoids are not monotone: they rise again at some distances).",
            lambda: E.position_similarity(table[:128]),
        )
        add(
            "embedding_norms",
            "Token against position norms",
            "If positions are much smaller than tokens, the model barely sees order (and vice versa).",
            lambda: E.embedding_norms(tok, table, ids, tokens),
        )
        add(
            "embedding_pca",
            "PCA of the embeddings",
            "Vowels, digits or punctuation may cluster; the title says whether consecutive positions lie "
            "close together (a curve) or not.",
            lambda: E.embedding_pca(tok, table, ids, tokens, inp.vocab_labels, token_ids=token_ids),
        )


def _add_inside(add, inp: _Input) -> None:
    """Inside the stack, and the close-ups (the decoder-only names tutorial's)."""
    model, ids, tokens, att_tokens, maps, tr = (
        inp.model,
        inp.ids,
        inp.tokens,
        inp.att_tokens,
        inp.maps,
        inp.trace,
    )
    others = inp.example.inputs[1:]  # a seq2seq model's decoder input rides along
    add(
        "residual_norms",
        "Residual stream",
        "The stream's mean token norm after each block (the title "
        "says how it changes); the bars show how much each attention and feed-forward sub-layer adds.",
        lambda: I.residual_norms(tr),
    )
    add(
        "residual_heatmap",
        "Residual stream per token",
        "Tokens whose norm grows fast are the ones the blocks write most into.",
        lambda: I.residual_heatmap(tr, att_tokens),
    )
    if tr.ff_pre:  # attention-only models have no feed-forward to draw
        add(
            "ff_activations",
            "Feed-forward activations",
            "The activation zeroes (ReLU) or shrinks (GELU) negative inputs. Firing rates are counted over "
            "this input and a few more of the model's inputs; a neuron is called dead only on enough tokens.",
            lambda: I.ff_activations(
                tr, layer=0, more=[T.trace(model, x, *others) for x in _more_inputs(model, ids)]
            ),
        )
    if T.norm_kinds(model) == {"layernorm"}:  # the figure normalises as LayerNorm
        add(
            "layernorm",
            "LayerNorm in and out",
            "The LayerNorm whose input is farthest from normalised: whatever its scale, each token comes out "
            "with mean 0 and std 1 before the gain and bias.",
            lambda: I.layernorm_histograms(tr),
        )
    add(
        "token_ids",
        "Token ids",
        "The id of each token of the input: what the embedding table is indexed by.",
        lambda: C.token_ids(ids, tokens),
    )
    add(
        "attention_bars",
        "Each query's attention, as bars",
        "Layer 0, head 0: the rows of its attention map, one bar chart per query.",
        lambda: C.attention_bars(maps["encoder"][0, 0], att_tokens),
    )
    add(
        "residual_variance",
        "Residual against attention output",
        "Per position, the variance of the stream entering block 0 and of what its attention adds to it.",
        lambda: C.residual_variance(tr.residual[0], tr.attn_update[0], att_tokens),
    )
    if tr.ff_pre:  # block 0's feed-forward (an attention-only model has none)
        ff_in = tr.cache[f"{tr.prefix}blocks.0.mlp.in"]
        add(
            "ff_scatter",
            "Feed-forward input against output",
            "Block 0's feed-forward, channel by channel: each point a token. A straight line would be a linear map.",
            lambda: C.ff_scatter(ff_in, tr.ff_update[0]),
        )


def _backward_steps(inp: _Input):
    """The backward walk-through's steps on this input and its loss (None: no loss, or a model
    too big for its float64 copy)."""
    loss_inputs = inp.example.loss_inputs
    if loss_inputs is None or inp.model.num_parameters() > BACKWARD_MAX_PARAMETERS:
        return None
    return BW.backward_steps(inp.model, *loss_inputs, sampling=BW.QUICK)


def _add_training(add, log):
    """The basics, and the training curves and diagnostics of the run's log: (summary, records)."""
    add(
        "activations",
        "Activation functions",
        "GELU is smooth and slightly negative for x < 0; ReLU's derivative jumps from 0 to 1.",
        B.activation_functions,
    )
    add(
        "softmax_temperature",
        "Softmax and temperature",
        "Sampling temperature divides the logits: T < 1 sharpens, T > 1 flattens.",
        B.softmax_temperatures,
    )
    if log is None:
        return None, None
    rows = B.log_rows(log)
    add(
        "training_curves",
        "Training curves",
        "Validation loss should follow training loss; a widening gap means overfitting.",
        lambda: B.training_curves(rows),
    )
    diag_records = D.diag_records(log)
    _add_diagnostics(add, diag_records)
    return _summary(rows), diag_records


def _write(
    out_dir: Path, inp: _Input, figures, steps, diag_records, summary, only, title, parts=()
) -> list[Path]:
    """The PNGs (and backward.txt), then report.html; the paths, report.html last."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths, embedded = [], []
    for stem, ftitle, caption, fig in figures:
        p = out_dir / f"{stem}.png"
        finish(fig, p)
        paths.append(p)
        if stem != "backward":  # the page shows the walk-through in its interactive Backward part
            embedded.append((ftitle, caption, p.read_bytes()))
    if steps is not None:
        paths.append(
            write_atomic(out_dir / "backward.txt", (BW.backward_table(steps) + "\n").encode("utf-8"))
        )
    tabs = _explorer_tabs(inp, diag_records)
    lens = None
    if only is None or "lens" in only:
        lens_figures, checks = _lens_part(inp)
        lens = ([], checks)
        for stem, ftitle, caption, fig in lens_figures:
            p = out_dir / f"{stem}.png"
            finish(fig, p)
            paths.append(p)
            lens[0].append((ftitle, caption, p.read_bytes()))
    model = inp.model
    config = {"model": type(model).__name__, "parameters": model.num_parameters(), **T.config_dict(model)}
    paths.append(
        write_report(
            out_dir / "report.html",
            title or f"scratchformer: {model.family} on {''.join(inp.tokens)[:60]!r}",
            tabs,
            embedded,
            config,
            summary,
            lens,
            backward=steps,
            parts=parts,
        )
    )
    return paths


def _progress_frames(records) -> list:
    """Per record, what the step slider draws of an induction or modadd run's progress measures
    (viz/induction.py, viz/grokking.py `slider_frames`); None per record for other runs."""
    if IND.has_measures(records):
        return IND.slider_frames(records)
    if any("modadd" in r for r in records):
        from scratchformer.viz.grokking import slider_frames

        return slider_frames(records)
    return [None] * len(records)


def _explorer_tabs(inp: _Input, diag_records) -> list[tuple]:
    """The attention explorer's tabs (see html.write_report)."""
    maps = inp.maps
    tabs = []
    for key, weights in maps.items():  # the main stack's self-attention first
        queries, keys = inp.axes(key)
        name = "self-attention" if key == "encoder" and len(maps) == 1 else key
        tabs.append((name, weights, keys, queries))
    if diag_records:  # the probe's attention at every diagnostics record, behind a step slider
        probe = [r for r in diag_records if r["probe"]["tokens"] == diag_records[-1]["probe"]["tokens"]]
        tokens_p = diag_records[-1]["probe"]["tokens"]
        frames = [diag_frame(r) for r in probe]
        for frame, progress in zip(frames, _progress_frames(probe)):  # the task's progress measures, if any
            if progress is not None:
                frame["progress"] = progress
        tabs.append(
            (
                f"probe over training: {''.join(tokens_p)[:30]}",
                np.array([r["probe"]["attention"] for r in probe]),
                tokens_p,
                tokens_p,
                [r["step"] for r in probe],
                frames,
            )
        )
    return tabs


def _add_diagnostics(add, records) -> None:
    """The training diagnostics of the run (its diagnostics.jsonl), when it has them."""
    if not records:
        return
    if IND.has_measures(records):  # an induction run: its progress measures
        add(
            "diag_induction",
            "Induction heads forming (progress measures)",
            "Loss on the first copy and on the repeat over training, the steepest fall of the repeat loss "
            "shaded; every head's prefix-matching score (attention from a token to the token after its "
            "previous occurrence). Titles are computed from the recorded numbers.",
            lambda: IND.progress_figure(records),
        )
    if not records[-1].get("layers"):  # attention-only blocks: no feed-forward to draw
        add(
            "diag_gradients",
            "Gradients per weight matrix (training diagnostics)",
            "The gradient the optimiser stepped with at the last record.",
            lambda: D.gradient_histograms(records),
        )
        add(
            "diag_update_ratio",
            "Update:data ratio over training",
            "log10 of std(update) / std(weights) at each record; makemore's guide: about -3.",
            lambda: D.update_ratios(records),
        )
        return
    add(
        "diag_activations",
        "Activations per layer (training diagnostics)",
        "The feed-forward activations on the probe batch at the last record: a layer piled up at the "
        "flat ends of its activation, or with many dead units, passes little gradient back.",
        lambda: D.activation_histograms(records),
    )
    add(
        "diag_activation_gradients",
        "Gradient at the activations per layer (training diagnostics)",
        "The gradient of the probe batch's loss arriving at each layer's feed-forward activation, all layers "
        "on one range: similar widths mean the gradient neither vanishes nor explodes through depth.",
        lambda: D.activation_gradients(records),
    )
    add(
        "diag_gradients",
        "Gradients per weight matrix (training diagnostics)",
        "The gradient the optimiser stepped with at the last record, one panel per matrix on its own "
        "range; very different widths (the stds) mean layers learning at very different speeds.",
        lambda: D.gradient_histograms(records),
    )
    add(
        "diag_update_ratio",
        "Update:data ratio over training",
        "log10 of std(update) / std(weights) at each record, for the weight matrices; makemore's guide: "
        "about -3. Far below, a matrix barely moves; far above, it is rewritten at each step. Biases and "
        "norm gains, apart on the right, sit higher and say less.",
        lambda: D.update_ratios(records),
    )
    add(
        "diag_saturation",
        "Saturated and dead units over training",
        "Saturated: the activation's slope is below 0.05 there, so little gradient passes. Dead: a unit "
        "never positive on any probe token.",
        lambda: D.saturation_dead(records),
    )
    if any("modadd" in r for r in records):  # a modadd run: its grokking progress measures
        from scratchformer.viz.grokking import grokking_figure

        add(
            "grokking",
            "Grokking progress measures (modular addition)",
            "Train and test loss with the step test loss falls below 1; restricted loss (the logits kept "
            "on the embedding's key Fourier frequencies) and excluded loss (those removed); the embedding's "
            "Fourier spectrum at the last record (Nanda et al. 2023).",
            lambda: grokking_figure(records),
        )


def _marked(fig, label: str):
    """Mark a figure of the initial weights in its suptitle."""
    text = fig._suptitle.get_text() if fig._suptitle is not None else ""
    fig.suptitle(f"{label}{' -- ' + text if text else ''}", fontsize=10)
    return fig


def _add_init_views(add, model, inp: _Input, token_ids, source=None) -> None:
    """The figures where training shows most, drawn for the run's initial weights (see `report`)
    on the same inputs. A model without a position table (rotary positions) has no position figures."""
    tr = T.trace(model, *inp.example.inputs)
    table, tok, att_tokens = T.position_table(model), T.token_table(model), inp.att_tokens
    ids, tokens = inp.ids, inp.tokens
    if source is None:
        label, short = "UNTRAINED model", "untrained"
        note = "The same figure for the untrained model (same configuration and seed): compare it with the trained one."
    else:
        label, short = "INITIAL weights", "initial weights"
        note = f"The same figure for the weights this run started from ({source}): compare it with the trained one."

    def mark(fig):
        return _marked(fig, label)

    add(
        "attention_grid_init",
        f"Every layer and head, {short}",
        note,
        lambda: mark(A.attention_grid(tr.maps["encoder"], att_tokens, title=f"{model.family}, {short}")),
    )
    if table is not None:  # rotary positions add no table to the tokens: nothing to draw
        if T.learned_positions(model):
            add(
                "positions_learned_init",
                f"Learned positions, {short}",
                note,
                lambda: mark(E.learned_positions(table)),
            )
        add(
            "position_similarity_init",
            f"Position similarity, {short}",
            note,
            lambda: mark(E.position_similarity(table[:128])),
        )
        add(
            "embedding_pca_init",
            f"PCA of the embeddings, {short}",
            note,
            lambda: mark(E.embedding_pca(tok, table, ids, tokens, inp.vocab_labels, token_ids=token_ids)),
        )
    add("residual_norms_init", f"Residual stream, {short}", note, lambda: mark(I.residual_norms(tr)))


MORE_INPUTS, MORE_TOKENS = 16, 32  # further inputs (a GPT's: samples this long) whose firing counts too
# the backward figure runs a float64 copy of the model: drawn for models up to this size (the
# names and tinyshakespeare defaults are 0.2M and 0.8M; GPT-2 small, 124M, would need 1 GB more)
BACKWARD_MAX_PARAMETERS = 5_000_000


def _more_inputs(model, ids) -> list[np.ndarray]:
    """Inputs beside `ids` for statistics that one short input cannot give: a language model's
    own samples from the input's first token; for the others, the input's tokens shuffled. Seeded."""
    rng = np.random.default_rng(0)
    if model.generates:
        start = np.full((MORE_INPUTS, 1), ids[0], dtype=np.int64)
        if model.config.block_size == 1:  # no room to generate: the start tokens alone
            return list(start)
        return list(model.generate(start, min(MORE_TOKENS, model.config.block_size - 1), rng=rng))
    return [rng.permutation(ids) for _ in range(MORE_INPUTS)]


# the lens figures of the report: stem -> (title, caption); {token!r}: the explained token
_LENS_TEXT = {
    "lens_logit_lens": (
        "Logit lens",
        "Each layer's residual stream through the final norm and the unembedding: the token it would "
        "predict next, and how sure it is. The last row is the model's own prediction.",
    ),
    "lens_ablation": (
        "Head ablation",
        "The loss on this input with one head's output set to 0: red heads help, blue heads hurt.",
    ),
    "lens_saliency": (
        "Saliency",
        "Which input tokens the logit of {token!r} (the prediction at the last position) depends on: "
        "gradient x input and integrated gradients (from {baseline}), through the hand-written backward.",
    ),
    "lens_head_scores": (
        "Head scores",
        "Mean attention on the previous token, the first token (a sink), earlier copies of the query's "
        "token; cross attention: the diagonal (copy) and the anti-diagonal (reverse).",
    ),
}
_SELF_HEAD_SCORES = (  # a model without cross attention
    "Mean attention on the previous token, the first token (a sink) and earlier copies of the query's token."
)


def _lens_part(inp: _Input) -> tuple[list, list[str]]:
    """The lens analyses on the report's input (`lens.report.lens_report`): (stem, title,
    caption, figure) each, and the check lines of what is drawn. The explained output is the
    model's prediction at the last position (a classifier's loss is on it too)."""
    from scratchformer.lens.report import BASELINE_TEXT, lens_report

    model, ex = inp.model, inp.example
    if inp.true_class is not None:  # the lens explains the prediction, not the true class
        ex = model.example(**inp.example_args)
    r = lens_report(model, ex, attribution=False)
    figures = []

    def add(stem, figure, caption=None, **words):
        """One figure of _LENS_TEXT's `stem`, its caption filled in with `words`."""
        title, text = _LENS_TEXT[stem]
        figures.append((stem, title, (caption or text).format(**words), figure))

    if r.logit_lens is not None:
        add(
            "lens_logit_lens",
            LF.logit_lens_figure(r.logit_lens, list(ex.positions), ex.output_labels.__getitem__),
        )
    if r.ablation is not None:  # a one-token GPT input predicts nothing: no loss to ablate
        add("lens_ablation", LF.ablation_figure(r.ablation))
    if r.saliency is not None:
        attributions = {
            "gradient x input": r.saliency.grad_x_input[0],
            "integrated gradients": r.integrated_gradients.attributions[0],
        }
        add(
            "lens_saliency",
            LF.saliency_figure(list(inp.tokens), attributions),
            token=ex.output_labels[r.target],
            baseline=BASELINE_TEXT[r.baseline],
        )
    cross = "cross" in inp.maps
    add(
        "lens_head_scores", LF.head_scores_figure(r.head_scores), caption=None if cross else _SELF_HEAD_SCORES
    )
    drawn = (
        r.logit_lens,
        r.ablation,
        r.integrated_gradients,
        r.head_scores,
    )  # the saliency figure: IG's check
    return figures, [str(a.check) for a in drawn if a is not None]


def report_bert(out_dir, text: str, path=None, only=None, on_note=None) -> list[Path]:
    """`report` for a BERT checkpoint directory (default: the installed all-MiniLM-L6-v2),
    with its WordPiece tokens as labels. only: as in `report`. A text longer than the
    tokenizer's max_length is cut to its first max_length tokens, as the encoder reads it; the
    report's title says so, and on_note (if given) is called with that note
    ("602 tokens, first 256 shown")."""
    from scratchformer.interop.bert import load_hf_bert
    from scratchformer.interop.sentence import default_model_dir
    from scratchformer.interop.wordpiece import WordPieceTokenizer

    path = default_model_dir() if path is None else Path(path)
    model = load_hf_bert(path)
    tok = WordPieceTokenizer.from_dir(path)
    ids = tok.encode([text])["input_ids"][0]
    tokens = tok.tokenize(text)
    total = tok.count_tokens(text)
    note = f"{total} tokens, first {len(ids)} shown" if total > len(ids) else None
    if note and on_note is not None:
        on_note(note)
    vocab = tok.tokenizer.get_vocab()
    labels = [""] * len(vocab)
    for word, i in vocab.items():
        if i < len(labels):
            labels[i] = word
    name = path.parent.name if path.name == "model" else path.name
    return report(
        model,
        out_dir,
        ids,
        tokens,
        vocab_labels=labels,
        only=only,
        title=f"{name}: {text[:60]!r}" + (f" ({note})" if note else ""),
    )
