"""Greedy decoding and beam search for `Seq2SeqTransformer` (batched, KV-cached).

Both return generated target ids (B, L) *without* BOS: each row is the hypothesis followed by
EOS, then `pad_id` up to the batch's longest row. A row that reaches `max_new_tokens` without
EOS has no EOS (and no padding).

Scores (used by beam search to rank finished hypotheses and by `sequence_scores`):

    score(y) = sum_t log p(y_t | y_<t, x) / len(y) ** alpha

where len(y) counts the generated tokens including EOS. alpha = 0 is the plain log-probability
(which favours short outputs); the default alpha = 0.6 is a mild length normalisation
(Wu et al. 2016 use a similar exponent); alpha = 1 is the mean log-probability per token.

Beam search (fairseq's scheme): every step extends each of the k live beams with every token
and keeps the 2k best candidates by total log-probability. Candidates ending in EOS that rank
among the first k are *finished*: they leave the beam and join the (up to k) best finished
hypotheses, ranked by normalised score. The live beams are the k best non-EOS candidates. A
batch element is done when k hypotheses have finished and the worst of them scores at least
as well as the best live beam normalised at its current length (Hugging Face's default rule;
exact for alpha = 0, a heuristic otherwise); at `max_new_tokens` the live beams count as
finished too. The answer is the best finished hypothesis. With k = 1 this is exactly greedy
decoding: when the top candidate is EOS it beats every live continuation.

All batch elements and beams run together: the arrays are (B * k, ...) and the only Python
loop is over time steps. The width is bounded: at most `MAX_BEAM_WIDTH`, and its memory
(`beam_bytes`, an upper bound) is checked against what the machine has before anything is
allocated, so an impossible width is a ConfigError or ResourceError, never a kernel kill.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from scratchformer.checks import check_int_in_range, check_token_ids
from scratchformer.errors import ConfigError
from scratchformer.limits.memory import check_fits
from scratchformer.nn.module import eval_mode
from scratchformer.ops import log_softmax_forward

MAX_BEAM_WIDTH = 1024  # beyond a few dozen beams the search finds nothing new; each costs memory and time


def _decoding(model) -> SimpleNamespace:
    """The model's decoding sizes and ids (`decoding_sizes()` of the models/base.py contract):
    n_layer, n_embd, n_inner, vocab_size (the decoder's), src_vocab_size, max_len, bos_id,
    eos_id, pad_id. ConfigError for a model without the encoder-decoder decoding API."""
    if not getattr(model, "decodes", False):
        raise ConfigError(
            f"greedy decoding and beam search drive encoder-decoder models (encode, decode_step); "
            f"a {type(model).__name__} has none"
        )
    return SimpleNamespace(**model.decoding_sizes())


def beam_bytes(model, batch: int, beam_width: int, src_len: int, steps: int) -> int:
    """Upper bound of a beam search's memory: per beam, the repeated encoder memory and every
    decoder layer's self- and cross-attention keys and values (float32), the live and finished
    sequences (int64), the feed-forward activations, and the step's (k * V) candidate scores,
    their log-softmax and argsort (float64 / int64). The sizes are the model's own answer."""
    d = _decoding(model)
    C, V, layers, hidden = d.n_embd, d.vocab_size, d.n_layer, d.n_inner
    per_beam = (
        4 * src_len * C  # encoder memory, repeated per beam
        + 4 * 2 * layers * (steps + src_len) * C  # self- and cross-attention K, V
        + 8 * 6 * steps  # live, finished and candidate sequences
        + 4 * 3 * hidden  # one step's feed-forward
        + 8 * 6 * V
    )  # logits, log-softmax, candidates, argsort
    return batch * beam_width * per_beam


def check_beam_width(
    beam_width, model=None, batch: int = 1, src_len: int = 1, steps: int = 1, name: str = "beam_width"
) -> int:
    """beam_width as an int, after refusing a non-integer, a width outside [1, MAX_BEAM_WIDTH]
    and (given the model) one whose search would not fit in memory. `name`: how the caller
    spells the option in the message (the CLI passes "--beam")."""
    if isinstance(beam_width, bool) or not isinstance(beam_width, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer, got {beam_width!r}")
    if not 1 <= beam_width <= MAX_BEAM_WIDTH:
        raise ConfigError(f"{name} must be in [1, {MAX_BEAM_WIDTH}], got {beam_width}")
    if model is not None:
        check_fits(
            beam_bytes(model, batch, int(beam_width), src_len, steps),
            f"a beam search of width {beam_width} over {batch} inputs",
            name,
        )
    return int(beam_width)


def _setup(model, src, max_new_tokens):
    d = _decoding(model)
    max_len = d.max_len
    src = check_token_ids(src, "src", d.src_vocab_size, max_len=max_len)
    n = max_len if max_new_tokens is None else max_new_tokens
    check_int_in_range("max_new_tokens", n, 1, max_len + 1)
    return src, n


def _trim(seqs: np.ndarray, eos: int) -> np.ndarray:
    """Drop trailing columns after the longest row (rows end at their first EOS)."""
    is_eos = seqs == eos
    lengths = np.where(is_eos.any(axis=1), is_eos.argmax(axis=1) + 1, seqs.shape[1])
    return seqs[:, : int(lengths.max(initial=1))]


def greedy_decode(
    model, src, max_new_tokens: int | None = None, return_scores: bool = False, alpha: float = 0.6
):
    """Batched greedy decoding: src (B, S) -> (B, L) ids (see the module docstring).

    With return_scores=True also returns each row's score (B,) with length exponent `alpha`."""
    src, n = _setup(model, src, max_new_tokens)
    with eval_mode(model):
        out, logp_sum, lengths = _greedy(model, src, n)
    out = _trim(out, _decoding(model).eos_id)
    return (out, logp_sum / lengths.astype(np.float64) ** alpha) if return_scores else out


def _greedy(model, src, n):
    """(ids (B, n), sum of log-probs (B,), lengths incl. EOS (B,)); the model is in eval mode."""
    c = _decoding(model)
    B = src.shape[0]
    src_mask = model.src_mask(src)
    memory = model.encode(src, src_mask)
    caches = model.new_caches()
    out = np.full((B, n), c.pad_id, dtype=np.int64)
    logp_sum = np.zeros(B)
    lengths = np.zeros(B, dtype=np.int64)
    done = np.zeros(B, dtype=bool)
    tokens = np.full((B, 1), c.bos_id, dtype=np.int64)
    for t in range(n):
        logits = model.decode_step(tokens, memory, src_mask, caches, offset=t)  # (B, V)
        best = logits.argmax(axis=-1)
        logp = log_softmax_forward(logits.astype(np.float64))[np.arange(B), best]
        logp_sum += np.where(done, 0.0, logp)
        lengths += ~done
        nxt = np.where(done, c.pad_id, best)
        out[:, t] = nxt
        done |= nxt == c.eos_id
        if done.all():
            break
        tokens = nxt[:, None]
    return out, logp_sum, lengths


def sequence_scores(model, src, hyps, alpha: float = 0.6) -> np.ndarray:
    """Model score of each hypothesis (B,) = sum log-probs / length ** alpha (teacher forced).

    hyps: (B, L) as returned by the decoders; a row is scored up to and including its first
    EOS (or over all L tokens when it has none)."""
    src, hyps = np.asarray(src), np.asarray(hyps)
    c = _decoding(model)
    B, _L = hyps.shape
    tgt_in = np.concatenate([np.full((B, 1), c.bos_id, dtype=hyps.dtype), hyps[:, :-1]], axis=1)
    with eval_mode(model):
        src_mask = model.src_mask(src)
        memory = model.encode(src, src_mask)
        # causal masking alone: positions after EOS cannot influence the scored ones
        logits = model.decode(tgt_in, memory, src_mask, tgt_padding=False)
    logp = log_softmax_forward(logits.astype(np.float64))
    tok_logp = np.take_along_axis(logp, hyps[:, :, None], axis=-1)[:, :, 0]  # (B, L)
    is_eos = hyps == c.eos_id
    after_eos = np.cumsum(is_eos, axis=1) - is_eos > 0  # strictly after the first EOS
    valid = ~after_eos
    lengths = valid.sum(axis=1)
    return (tok_logp * valid).sum(axis=1) / lengths.astype(np.float64) ** alpha


def beam_search(
    model,
    src,
    beam_width: int = 4,
    max_new_tokens: int | None = None,
    alpha: float = 0.6,
    return_scores: bool = False,
    include_greedy: bool = True,
):
    """Batched beam search: src (B, S) -> (B, L) ids of the best hypothesis per row.

    With return_scores=True also returns their scores (B,) (normalised as documented above).
    include_greedy: also decode greedily and return the greedy hypothesis where it scores
    strictly better than every finished beam, so the result never scores below greedy's
    (plain beam search can prune the greedy path early and, rarely, end up worse; costs one
    greedy decode, about 1/k of the search)."""
    k = check_beam_width(beam_width)
    src, n = _setup(model, src, max_new_tokens)
    check_beam_width(k, model, *src.shape, n)
    if alpha < 0:
        raise ConfigError(f"alpha must be >= 0, got {alpha}")
    c = _decoding(model)
    pad, eos = c.pad_id, c.eos_id
    B = src.shape[0]
    bk = np.arange(B)[:, None]
    with eval_mode(model):
        src_mask = model.src_mask(src)
        memory = model.encode(src, src_mask)
        memory = np.repeat(memory, k, axis=0)  # (B * k, S, C), beam-major within a row
        src_mask = np.repeat(src_mask, k, axis=0)  # (B * k, 1, 1, S)
        caches = model.new_caches()
        seqs = np.full((B, k, n), pad, dtype=np.int64)  # live beams
        cum = np.full((B, k), -np.inf)
        cum[:, 0] = 0.0  # start from one beam so the first step does not pick duplicates
        fin_seqs = np.full((B, k, n), pad, dtype=np.int64)
        fin_scores = np.full((B, k), -np.inf)
        n_fin = np.zeros(B, dtype=np.int64)
        done = np.zeros(B, dtype=bool)
        tokens = np.full((B * k, 1), c.bos_id, dtype=np.int64)
        steps = 0
        for t in range(n):
            steps = t + 1
            logits = model.decode_step(tokens, memory, src_mask, caches, offset=t)  # (B*k, V)
            V = logits.shape[-1]
            logp = log_softmax_forward(logits.astype(np.float64)).reshape(B, k, V)
            cand = (cum[:, :, None] + logp).reshape(B, k * V)
            m = min(2 * k, k * V)
            # the m best candidates, ties broken towards the lower (beam, token) index
            top = np.argsort(-cand, axis=1, kind="stable")[:, :m]
            top_scores = np.take_along_axis(cand, top, axis=1)
            beam_idx, tok = top // V, top % V
            is_eos = tok == eos

            # finished: EOS candidates among the first k, of rows not yet done
            final = is_eos & (np.arange(m) < k) & np.isfinite(top_scores) & ~done[:, None]
            if final.any():
                new_seqs = seqs[bk, beam_idx]  # (B, m, n)
                new_seqs[:, :, t] = eos
                new_scores = np.where(final, top_scores / float(t + 1) ** alpha, -np.inf)
                all_scores = np.concatenate([fin_scores, new_scores], axis=1)
                order = np.argsort(-all_scores, axis=1, kind="stable")[:, :k]
                fin_scores = np.take_along_axis(all_scores, order, axis=1)
                fin_seqs = np.concatenate([fin_seqs, new_seqs], axis=1)[bk, order]
                n_fin += final.sum(axis=1)

            # live beams: the k best non-EOS candidates (at most k of the 2k end in EOS)
            keep = np.argsort(is_eos, axis=1, kind="stable")[:, :k]
            sel_beam = np.take_along_axis(beam_idx, keep, axis=1)
            sel_tok = np.take_along_axis(tok, keep, axis=1)
            cum = np.take_along_axis(top_scores, keep, axis=1)
            seqs = seqs[bk, sel_beam]
            seqs[:, :, t] = sel_tok
            flat = (bk * k + sel_beam).reshape(-1)
            for cache in caches:
                for kv in cache:
                    kv.select(flat)
            tokens = sel_tok.reshape(B * k, 1)
            # done: k finished, and the worst of them beats the best live beam scored at its
            # current length (Hugging Face's default stopping rule; exact when alpha = 0,
            # where scores only fall as beams grow)
            best_live = cum.max(axis=1) / float(t + 1) ** alpha
            done |= (n_fin >= k) & (fin_scores[:, k - 1] >= best_live)
            if done.all():
                break
        else:
            # out of steps: live beams (no EOS) compete with the finished ones
            live_scores = np.where(done[:, None], -np.inf, cum / float(steps) ** alpha)
            all_scores = np.concatenate([fin_scores, live_scores], axis=1)
            order = np.argsort(-all_scores, axis=1, kind="stable")[:, :k]
            fin_scores = np.take_along_axis(all_scores, order, axis=1)
            fin_seqs = np.concatenate([fin_seqs, seqs], axis=1)[bk, order]
        best, best_scores = fin_seqs[:, 0], fin_scores[:, 0]
        if include_greedy:
            g, g_logp, g_len = _greedy(model, src, n)
            g_scores = g_logp / g_len.astype(np.float64) ** alpha
            better = g_scores > best_scores
            best = np.where(better[:, None], g, best)
            best_scores = np.where(better, g_scores, best_scores)
    best = _trim(best, eos)
    return (best, best_scores) if return_scores else best
