"""Data parallelism over a machine's cores: each thread trains a replica on a slice of the batch.

NumPy releases the GIL inside its ufunc loops and BLAS calls, so two Python threads can run
the elementwise work of a step (GELU, LayerNorm, softmax, dropout ...) on two cores at once,
which OpenBLAS's own threads never do: they split only the GEMMs. `DataParallel` gives each
thread a replica of the model (its own caches and gradient buffers, the *same* weight arrays)
and one slice of the batch, so threads meet once per forward and once per backward:

    forward:   loss = sum_i n_i * loss_i / N        replica i on rows [s_i, s_{i+1}) of the batch,
                                                    n_i its loss terms (valid targets), N = sum n_i
    backward:  grad = sum_i d(n_i * loss_i / N)     replica i's backward with dloss * n_i / N, then
                                                    its gradients are added into the model's

which is the gradient of the whole batch's mean loss, as one model would compute it, up to
float rounding (the sums over the batch are taken in two pieces). While the replicas run,
OpenBLAS is held to one thread each (threadpoolctl), so two threads never fight over two cores.

    model = DataParallel(GPT(config), threads=2)   # model.module is the GPT
    logits, loss = model(x, y)                     # x, y: (B, T); logits (B, T, V) as the GPT's
    model.backward()                               # gradients land in the GPT's parameters
    opt = AdamW(param_groups(model.module, 0.1))   # the optimiser sees the GPT's parameters

Dropout: replica 0 is the model itself and draws from the model's generators; replica i > 0
draws, at each forward, from a copy of each generator jumped ahead i * 2^127 draws
(`bit_generator.jumped(i)`), a function of the model's generator state alone: the same seed
gives the same result, and a checkpoint holding the model's generator state resumes exactly.
Results differ (in the last bits, and in which elements dropout drops) from a single-threaded
run of the same seed; `threads=1` is the model alone.

Eval mode, a forward without targets (no loss), or a batch too small to be worth splitting
(fewer than `min_tokens` = 256 tokens per slice) runs the model alone. Below that, measured
here (2 cores), the threads' turns at the GIL cost more than the second core saves: a
1-layer 32-wide GPT on 8 x 16 tokens took 2.5 ms a step in two threads against 0.8 in one;
the names model on 64 x 16 tokens (512 a slice) gained about 1.2x, tinyshakespeare's
12 x 64 (384 a slice) about 1.15x.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from scratchformer.errors import BackwardError, ConfigError
from scratchformer.nn.module import Module, trusted_calls

__all__ = ["DataParallel"]


class DataParallel(Module):
    """Train `module` on `threads` slices of each batch at once (see the module docstring).

    module: a model whose forward takes batch-first arrays and returns (output, loss), whose
    loss is a mean of `loss_count()` terms, and whose backward takes `dloss` (GPT,
    TransformerClassifier, Seq2SeqTransformer). Array arguments whose first axis is the batch
    are split; other arguments go to every replica unchanged. Outputs are concatenated along
    the batch axis, so `(output, loss)` is what the module alone would return.
    """

    def __init__(self, module: Module, threads: int = 2, min_tokens: int = 256):
        super().__init__()
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ConfigError(f"threads must be a positive integer, got {threads!r}")
        self.module = module
        self.threads = threads
        self.min_tokens = min_tokens  # per slice: elements of the first argument (token ids)
        self.training = module.training
        module._cache = None  # not worth copying into the replicas
        self._replicas = [module] + [copy.deepcopy(module) for _ in range(threads - 1)]
        self._pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="scratchformer") if threads > 1 else None
        self._blas = None  # threadpoolctl's handle on the BLAS library, made on first use
        self._weights = None  # n_i / N of the last parallel forward; None: the module ran alone

    # -- the door: the module's own checks, on the whole batch --------------------------------
    def check_input(self, *args, **kwargs) -> None:
        self.module.check_input(*args, **kwargs)

    def train(self, mode: bool = True) -> DataParallel:
        self.training = mode
        for replica in self._replicas:
            replica.train(mode)
        return self

    def parameters(self):
        return self.module.parameters()

    def named_parameters(self, prefix: str = ""):
        return self.module.named_parameters(prefix)

    # -- forward / backward -------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        first = args[0] if args and isinstance(args[0], np.ndarray) and args[0].ndim else None
        batch = 0 if first is None else len(first)
        n = min(self.threads, batch, 0 if first is None else first.size // self.min_tokens)
        if n < 2 or not self.training:
            self._weights = None
            return self.module(*args, **kwargs)
        bounds = np.linspace(0, batch, n + 1).round().astype(int)  # row ranges of the slices
        self._link_replicas(n)

        def run(i):
            part = [a[bounds[i]:bounds[i + 1]] if _batch_first(a, batch) else a for a in args]
            return self._replicas[i](*part, **kwargs)

        results = self._in_threads(run, n)
        if any(loss is None for _, loss in results):  # no targets: outputs only, nothing to backward
            self._weights = None
            self.module._cache = None
            return np.concatenate([out for out, _ in results]), None
        counts = [self._replicas[i].loss_count() for i in range(n)]
        total = sum(counts)
        self._weights = [c / max(total, 1) for c in counts]
        loss = sum(w * loss for w, (_, loss) in zip(self._weights, results))
        return np.concatenate([out for out, _ in results]), float(loss)

    def backward(self, dloss: float = 1.0) -> None:
        """Gradients of the last forward's loss, added into the module's parameters."""
        if self._weights is None:
            if not self.training:
                raise BackwardError("DataParallel.backward() needs a training-mode forward with targets first")
            return self.module.backward(dloss=dloss)
        weights, self._weights = self._weights, None
        self._in_threads(lambda i: self._replicas[i].backward(dloss=dloss * weights[i]), len(weights))
        own = self.module.parameters()
        for replica in self._replicas[1:len(weights)]:
            for p, q in zip(own, replica.parameters()):
                p.grad += q.grad
                q.grad[...] = 0

    # -- helpers --------------------------------------------------------------------------------
    def _link_replicas(self, n: int) -> None:
        """Point replicas 1..n-1 at the module's current weight arrays (an optimiser may have
        moved them into its flat buffer), mode and dropout generators (jumped copies)."""
        own = self.module.parameters()
        rngs = [m.rng if isinstance(getattr(m, "rng", None), np.random.Generator) else None
                for m in self.module.modules()]
        for i, replica in enumerate(self._replicas[1:n], start=1):
            for p, q in zip(own, replica.parameters()):
                q.data = p.data
            jumped = {}  # one jumped generator per distinct generator (models often share one)
            for rng, m in zip(rngs, replica.modules()):
                if rng is not None:
                    if id(rng) not in jumped:
                        jumped[id(rng)] = _jumped(rng, i)
                    m.rng = jumped[id(rng)]

    def _in_threads(self, run, n: int) -> list:
        """[run(0), ..., run(n - 1)]: run(0) here, the others on the pool, one BLAS thread each."""
        if self._blas is None:
            from threadpoolctl import ThreadpoolController

            self._blas = ThreadpoolController().select(user_api="blas")
        with self._blas.limit(limits=1):
            futures = [self._pool.submit(_trusted, run, i) for i in range(1, n)]
            try:
                first = run(0)
            finally:
                rest = [f.result() for f in futures]  # wait for every thread, even after an error
        return [first] + rest


def _jumped(rng: np.random.Generator, i: int) -> np.random.Generator:
    """A generator i * 2^127 draws ahead of `rng` (rng itself does not move). Bit generators
    without jumped() (SFC64) seed the copy from one draw of rng instead."""
    bits = rng.bit_generator
    if hasattr(bits, "jumped"):
        return np.random.Generator(bits.jumped(i))
    return np.random.Generator(type(bits)(rng.integers(2**63)))


def _batch_first(a, batch: int) -> bool:
    return isinstance(a, np.ndarray) and a.ndim > 0 and a.shape[0] == batch


def _trusted(run, i):
    with trusted_calls():  # the door (this wrapper) checked the whole batch
        return run(i)
