# learner bug (cross_entropy): divided by every entry of the logits
# expect: off by a constant factor
"""Exercise cross_entropy: the backward of the mean cross-entropy of logits.

    p = softmax(logits)                   (N, V)
    loss = -(1/N) sum_n log p[n, t_n]     a number

Write `backward`: given dloss (a number, the gradient flowing into the loss; 1.0 when the loss
is the final output), return dlogits with the logits' shape.
"""

import numpy as np


class CrossEntropy:
    """Mean cross-entropy over N rows. logits: (N, V) float; targets: (N,) int in [0, V)."""

    def forward(self, logits, targets):
        shifted = logits - logits.max(axis=-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # log-softmax
        N = logits.shape[0]
        self.logp, self.targets = logp, targets  # kept for the backward
        return float(-logp[np.arange(N), targets].mean())

    def backward(self, dloss=1.0):
        """dloss: a number. Returns dlogits: (N, V)."""
        N = self.logp.shape[0]
        dlogits = np.exp(self.logp)
        dlogits[np.arange(N), self.targets] -= 1
        return dlogits * dloss / dlogits.size
