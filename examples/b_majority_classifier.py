"""The majority-token classifier: an encoder reads 8 tokens over {0, 1, 2} and says which
token is most frequent (ties: the smallest). It is trained here to >= 99% held-out accuracy.

What it shows:
  - a 2-layer pre-norm encoder with sinusoidal positions and mean pooling, trained with AdamW
    and the hand-written backward of every layer, to >= 99% accuracy on sequences it never saw;
  - the class probabilities beside the last layer's heads (classifier_attention.png) and every
    layer x head (attention_grid.png) for one input, and the training curves.
What to notice:
  - counting needs no order: the heads of the last layer spread their weight over the tokens
    that are the majority symbol, and the prediction is confident (one bar near 1);
  - the loss falls in two phases: first the easy, lopsided sequences, then the near ties.
Run: python examples/b_majority_classifier.py [--quick] [--out DIR]   (full: about a minute)
"""

# %% Set-up: the data, drawn so that no held-out sequence is ever trained on
import numpy as np

from _common import setup, train
from scratchformer import viz
from scratchformer.data.tasks import format_digits, make_split
from scratchformer.models import ClassifierConfig, TransformerClassifier
from scratchformer.nn import manual_seed

out, quick = setup("b_majority_classifier", __doc__)
steps = 30 if quick else 600
train_set, held_out = make_split("majority", 6000, 400, seed=0)
print(f"{len(train_set)} training and {len(held_out)} held-out sequences, e.g. "
      f"{format_digits(held_out.x[0])} -> {held_out.y[0]}")

# %% The model: RUN_DEFAULTS["majority"]'s settings (scratchformer train --task majority)
manual_seed(0)
model = TransformerClassifier(ClassifierConfig(vocab_size=3, n_classes=3, max_len=8, n_layer=2, n_head=4,
                                               n_embd=64, n_inner=128, pooling="mean"))
print(f"{model.num_parameters():,} parameters")


def batch(rng):
    i = rng.integers(0, len(train_set), size=64)
    return train_set.x[i], train_set.y[i]


# %% Train, then measure on the held-out sequences
rows = train(model, batch, steps, lr=3e-3)
accuracy = float((model.predict(held_out.x) == held_out.y).mean())
print(f"held-out accuracy: {accuracy:.4f} after {steps} steps (final train loss {rows[-1]['train_loss']:.4f})")
if not quick:
    assert accuracy >= 0.99, f"expected >= 99% held-out accuracy, got {accuracy:.2%}"

# %% Look inside: the prediction beside the heads, every head, the training curves
x = held_out.x[int(np.argmax(held_out.y == 2))]  # a sequence whose majority is 2
tokens = [str(t) for t in x]
probs = viz.trace.class_probabilities(model, x)
maps = viz.trace.attention_maps(model, x)["encoder"]  # (n_layer, n_head, 8, 8)
print(f"input {format_digits(x)}: probabilities {np.round(probs, 3).tolist()}, predicted {int(probs.argmax())}")
viz.classifier_attention(probs, ["majority 0", "majority 1", "majority 2"], maps, tokens,
                         path=out / "classifier_attention.png")
viz.attention_grid(maps, tokens, title="majority classifier", path=out / "attention_grid.png")
viz.training_curves(rows, path=out / "training_curves.png")
print(f"figures in {out}")
