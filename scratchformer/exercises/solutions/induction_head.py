"""Exercise induction_head: find the induction head of a small trained model.

The model is a 2-layer attention-only GPT (2 heads per layer) trained on `--task induction`:
sequences of 32 symbols whose second part repeats a random segment of the first. It predicts
the repeated half well because one of its heads is an induction head (Olsson et al. 2022):
at a token that occurred before, it attends to the token that FOLLOWED that earlier
occurrence, and copies it. Write `find_induction_head(model, tokens)`: return the (layer,
head) of that head, found from the model's behaviour on `tokens` (int array (B, T), T = 32,
the sequences of the task), not written in: the grader also asks it of the same model with
its heads in another order. It is graded by ablation: zeroing your head's output must raise
the loss on the repeated half by most of what zeroing the best head does.

To try it:
    from scratchformer.exercises.induction import load_model, probe_tokens
    model, data = load_model(); tokens = probe_tokens(data)
    print(find_induction_head(model, tokens))
Each head's attention pattern is one call away: `lens.run_with_cache(model, tokens,
names=["blocks.1.attn.pattern"])` returns (output, cache), cache[name] of shape (B, H, T, T),
pattern[b, h, i, j] = how much query position i attends to key position j.
"""

import numpy as np

from scratchformer import lens


def find_induction_head(model, tokens):
    """model: a scratchformer GPT; tokens: (B, T) int. Returns (layer, head), two ints."""
    # BEGIN SOLUTION
    # the prefix-matching score: attention from each position to the one just after an earlier
    # occurrence of its own token, averaged over the positions that have one
    B, T = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, T, T): [b, i, j] token j is token i
    earlier = np.tril(np.ones((T, T), dtype=bool), k=-1)  # j < i
    target = np.zeros((B, T, T), dtype=bool)
    target[:, :, 1:] = (same & earlier)[:, :, :-1]  # key j + 1 follows an earlier occurrence j of token i
    has = target.any(axis=-1)  # (B, T): the queries with such a key
    n_layer = model.config.n_layer
    names = [f"blocks.{layer}.attn.pattern" for layer in range(n_layer)]
    _, cache = lens.run_with_cache(model, tokens, names=names)
    scores = np.stack(
        [
            ((cache[name] * target[:, None]).sum(-1) * has[:, None]).sum(axis=(0, 2)) / has.sum()
            for name in names
        ]
    )  # (n_layer, H): the mean over the queries that have such a key
    layer, head = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return int(layer), int(head)
    # END SOLUTION
