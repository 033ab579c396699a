"""Data parallelism over a machine's cores: worker processes train replicas on slices of each batch.

OpenBLAS's threads split the GEMMs of a step over the cores, but everything else (GELU,
LayerNorm, softmax, dropout, the Python around them) runs on one core. Python threads do not
help there: a NumPy call on a small array is shorter than the GIL's hand-over between two
threads (two threads running 88,000-element ufuncs took 3.4 ms where one thread took 3.2).
So `DataParallel` forks worker processes, each holding a replica of the model, and splits
each batch into slices, one per process (this one runs the first):

    forward:   loss = sum_i n_i * loss_i / N        process i on rows [s_i, s_{i+1}) of the batch,
                                                    n_i its loss terms (the model's `loss_terms` of
                                                    the slice: its targets that count), N = sum n_i
    backward:  grad = sum_i d(n_i * loss_i / N)     process i's backward with dloss * n_i / N; the
                                                    workers' gradients are added into the model's

which is the gradient of the whole batch's mean loss, as the model alone would compute it, up
to float rounding (sums over the batch are taken in pieces). Every process uses one BLAS thread
while the slices run. Weights and gradients travel through shared memory (anonymous mmap, made
before the fork): weights already there are read by the workers in place, the others are copied
there before each forward; after each backward this process adds each worker's gradient buffer
into the model's. Batches, losses and outputs go through pipes as raw bytes with a JSON header:
nothing is pickled.

    opt = make_adamw(param_groups(gpt, 0.1))              # the optimiser sees the GPT's parameters
    model = DataParallel(gpt, workers=2, optimizer=opt)   # model.module is the GPT
    logits, loss = model(x, y)                     # x, y: (B, T); logits (B, T, V) as the GPT's
    model.backward()                               # gradients land in the GPT's parameters
    model.close()                                  # or let it be garbage-collected

The optimiser is optional. Given, what it and the model declare is moved into shared memory
before the first fork, by one call (`share_memory`): the optimiser's `state_arrays()` (a
FlatAdamW's flat weights, gradients and moments), which it takes back as shared copies through
`adopt_state_arrays()` (its parameters' views following), then every parameter's `.data` and
`.grad` not yet there. The workers then read the weights in place, and the optimiser's writes
each step do not leave each worker a stale copy of every page it inherited (measured at medium
size: 172 MB a worker). Layers, models and optimisers import no process code.

This is the only module of scratchformer that forks; the trainer and `scratchformer eval` opt in.

Dropout: slice 0 draws from the model's own generators; worker i draws, at each forward, from
a copy of each generator jumped ahead i * 2^127 draws (`bit_generator.jumped(i)`), a function of
the model's generator state alone: the same seed gives the same result, and a checkpoint of the
model's generator state resumes exactly. Results differ (in the last bits, and in which elements
dropout drops) from a run with `workers=1`, which is the model alone.

Eval mode splits too (the workers follow the model's mode), so a whole-split evaluation runs
on every core; there is nothing to backward then. The model alone runs for a batch under
`min_tokens` (256) tokens a slice, where starting the slices costs more than it saves; and
where processes cannot be forked safely (`can_fork_workers()`: Linux only, macOS's and
Windows's BLAS and process start-up do not allow it; the trainer then says so and records
workers=1). A training-mode forward without targets returns the slices' outputs and no loss.

Workers start at the first forward that splits, as many as that batch has slices (a batch with
more slices later forks the rest), and are restarted if the model's parameters change shape or
dtype, or if weights they read in place are replaced (a FlatAdamW bound again makes new flat
buffers).

Failures end in one `ParallelWorkerError`, never a hang: a worker that fails or dies; a worker
that has not answered `timeout` seconds (default 60) after this process finished its own slice
(stopped with SIGSTOP, or stuck); a fork the system refuses (the process limit). The workers are
then stopped (SIGKILL for one that does not exit at once: a stopped process ignores SIGTERM),
and the next forward forks fresh ones. While waiting for a worker, `interrupted()` (the
trainer's pending Ctrl-C) is checked every 0.1 s and raises `WaitInterrupted`.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import multiprocessing
import os
import signal
import sys
import time
import weakref
from collections.abc import Callable

import numpy as np

from scratchformer.errors import BackwardError, ConfigError, ParallelWorkerError
from scratchformer.nn.layers import dropout_modules
from scratchformer.nn.module import Module, trusted_calls

__all__ = [
    "DataParallel",
    "WaitInterrupted",
    "can_fork_workers",
    "check_workers",
    "max_workers",
    "share_memory",
    "workers_that_run",
]

WORKER_TIMEOUT_S = 60.0  # a worker silent this long after this process's own slice is stopped or stuck
_POLL_S = 0.1  # how often a wait for a worker checks the time and a pending Ctrl-C


class WaitInterrupted(KeyboardInterrupt):
    """Ctrl-C (the `interrupted` callback) while waiting for a worker: the step was abandoned."""


def can_fork_workers() -> bool:
    """True where DataParallel's worker processes can run (Linux, with os.fork)."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and "fork" in multiprocessing.get_all_start_methods()
    )


def max_workers() -> int:
    """The most processes a run may ask for: 4 per core (more only share the cores), at least 8."""
    return max(8, 4 * (os.cpu_count() or 1))


def check_workers(workers, option: str = "--workers") -> None:
    """ConfigError naming `option` unless 1 <= workers <= max_workers()."""
    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= max_workers():
        raise ConfigError(
            f"{option} must be an integer from 1 to {max_workers()} (4 per core of this machine, "
            f"at least 8), got {workers!r}"
        )


def workers_that_run(workers: int, batch_size: int) -> tuple[int, str | None]:
    """How many of `workers` processes (checked: `check_workers`) can run batches of
    `batch_size` rows here, and a note when that is fewer than asked: one where processes cannot
    be forked (`can_fork_workers`), at most one per row of a batch."""
    check_workers(workers)
    if workers > 1 and not can_fork_workers():
        return 1, (
            f"this platform cannot fork worker processes: training in one process (--workers 1 instead of {workers})"
        )
    if workers > batch_size:
        return batch_size, (
            f"--workers {workers} is more than the {batch_size} rows of a batch: training in {batch_size} processes"
        )
    return workers, None


class DataParallel(Module):
    """Train `module` on `workers` slices of each batch at once (see the module docstring).

    module: a model (models/base.py's contract) whose forward takes batch-first arrays and
    returns (output, loss), whose loss is a mean of `loss_terms(...)` terms (GPT,
    TransformerClassifier, Seq2SeqTransformer, BertClassifier). Positional array arguments whose first axis is
    the batch are split; keyword arguments (numbers, strings) go to every slice. Outputs are
    concatenated along the batch axis, so `(output, loss)` is what the module alone returns.
    optimizer: an optimiser declaring its state (`state_arrays()`, `adopt_state_arrays()`): its
        arrays move into shared memory before the first fork (see the module docstring).
    train_outputs: False makes a training-mode forward return (None, loss): the workers send
        back their losses alone (eval mode still returns outputs). The trainer's steps use the
        loss only, and a GPT-2's logits (B, T, 50257) are 100 MB a step to send and join.
    timeout: seconds a worker may stay silent after this process finished its own slice
        (None: WORKER_TIMEOUT_S, 60). interrupted: checked while waiting; True raises WaitInterrupted.
    """

    def __init__(
        self,
        module: Module,
        workers: int = 2,
        min_tokens: int = 256,
        optimizer=None,
        train_outputs: bool = True,
        timeout: float | None = None,
        interrupted: Callable[[], bool] | None = None,
    ):
        super().__init__()
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ConfigError(f"workers must be a positive integer, got {workers!r}")
        timeout = WORKER_TIMEOUT_S if timeout is None else timeout
        if not (isinstance(timeout, (int, float)) and timeout > 0 and math.isfinite(timeout)):
            raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.module = module  # its `training` flag is the mode that runs (eval_mode(module) works too)
        self.workers = workers
        self.min_tokens = min_tokens  # per slice: elements of the first argument (token ids)
        self.optimizer = optimizer  # its arrays move into shared memory before the first fork
        self.train_outputs = bool(train_outputs)
        self.timeout = float(timeout)
        self.interrupted = interrupted
        self.training = module.training
        self._pool = None  # _WorkerPool, started at the first forward that splits
        self._weights = None  # n_i / N of the last split forward; None: the module ran alone
        self._blas = None  # threadpoolctl's handle on the BLAS library

    # -- the door: the module's own checks, on the whole batch --------------------------------
    def check_input(self, *args, **kwargs) -> None:
        self.module.check_input(*args, **kwargs)

    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (none before the first split forward)."""
        return [] if self._pool is None else [p.pid for p in self._pool.procs.values()]

    def close(self) -> None:
        """Stop the worker processes and free the shared memory (also done when collected)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # -- forward / backward -------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        first = args[0] if args and isinstance(args[0], np.ndarray) and args[0].ndim else None
        batch = 0 if first is None else len(first)
        n = min(self.workers, batch, 0 if first is None else first.size // self.min_tokens)
        self._weights = None
        outputs = self.train_outputs or not self.module.training  # see train_outputs
        if n < 2 or not can_fork_workers():
            out, loss = self.module(*args, **kwargs)
            return out if outputs else None, loss
        bounds = np.linspace(0, batch, n + 1).round().astype(int)  # row ranges of the slices
        slices = [
            [a[bounds[i] : bounds[i + 1]] if _batch_first(a, batch) else a for a in args] for i in range(n)
        ]
        with self._closed_on_failure():
            return self._split_forward(n, slices, kwargs, outputs)

    def _split_forward(self, n, slices, kwargs, outputs):
        """Slice 0 here, slices 1..n-1 in the workers; (joined outputs or None, weighted loss)."""
        with self._one_blas_thread():  # also while forking: a child then starts no BLAS threads
            pool = self._start_pool(n)
            pool.sync_weights()
            for i in range(1, n):
                pool.send_forward(i, slices[i], kwargs, self.module.training, outputs)
            try:
                out, loss = self.module(*slices[0], **kwargs)
            finally:
                replies = [pool.receive(i) for i in range(1, n)]  # every worker answers, even after an error
        if loss is None or any(r["loss"] is None for r in replies):  # no targets: outputs only
            self.module._cache = None
            return np.concatenate([out] + [r["output"] for r in replies]) if outputs else None, None
        counts = [self.module.loss_terms(*s, **kwargs) for s in slices]
        total = sum(counts)
        weights = [c / max(total, 1) for c in counts]
        if self.module.training:  # what backward needs
            self._weights = weights
        losses = [loss] + [r["loss"] for r in replies]
        return (
            np.concatenate([out] + [r["output"] for r in replies]) if outputs else None,
            float(sum(w * x for w, x in zip(weights, losses))),
        )

    def backward(self, dloss: float = 1.0) -> None:
        """Gradients of the last forward's loss, added into the module's parameters."""
        if self._weights is None:
            if not self.module.training:
                raise BackwardError(
                    "DataParallel.backward() needs a training-mode forward with targets first"
                )
            return self.module.backward(dloss=dloss)
        weights, self._weights = self._weights, None
        with self._closed_on_failure():
            self._split_backward(weights, dloss)

    def _split_backward(self, weights, dloss):
        pool = self._pool
        with self._one_blas_thread():
            for i in range(1, len(weights)):
                pool.send_backward(i, dloss * weights[i])
            try:
                self.module.backward(dloss=dloss * weights[0])
            finally:
                for i in range(1, len(weights)):
                    pool.receive(i)
        for i in range(1, len(weights)):
            pool.add_gradients(i)

    # -- helpers --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _closed_on_failure(self):
        """A worker that failed leaves the pool out of step: stop it; the next forward forks anew."""
        try:
            yield
        except ParallelWorkerError:
            self.close()
            raise

    def _start_pool(self, n: int) -> _WorkerPool:
        """Workers 1..n-1, forked now if they are not running (n: this batch's slices)."""
        if self._pool is not None and (self._pool.stale() or len(self._pool.procs) < n - 1):
            self.close()  # the parameters changed (model.to(float64), ...) or more slices: fork fresh replicas
        if self._pool is None:
            if self.optimizer is not None:
                share_memory(self.optimizer, self.module.parameters())
            self._pool = _WorkerPool(self.module, n, self.timeout, self.interrupted)
            weakref.finalize(self, self._pool.close)
        return self._pool

    def _one_blas_thread(self):
        if self._blas is None:
            from threadpoolctl import ThreadpoolController

            self._blas = ThreadpoolController().select(user_api="blas")
        return self._blas.limit(limits=1)


class _WorkerPool:
    """Worker processes 1..workers-1, each with a replica (forked), a pipe, and a gradient
    buffer; one weight buffer shared by all. The module's parameter list and its modules that
    hold a dropout generator are taken once, here (walking the module tree every step cost
    about a tenth of a small model's step)."""

    def __init__(
        self,
        module: Module,
        workers: int,
        timeout: float = WORKER_TIMEOUT_S,
        interrupted: Callable[[], bool] | None = None,
    ):
        self.timeout, self.interrupted = timeout, interrupted
        self.params = params = module.parameters()
        self.layout = _layout(params)
        self.rng_modules = dropout_modules(module)
        # weights already in shared memory (moved there by share_memory) are read by the
        # workers in place; the others are copied into a shared buffer before each forward
        self.direct = [p.data if is_shared(p.data) else None for p in params]
        self.copied = [p for p, direct in zip(params, self.direct) if direct is None]
        self.seen = [p.data for p in params]  # the arrays stale() last saw
        self.weights = _SharedParams(self.copied)  # this process writes, workers read
        self.grads = {i: _SharedParams(params) for i in range(1, workers)}  # worker i writes, we read
        ctx = multiprocessing.get_context("fork")
        self.conns, self.procs = {}, {}
        for i in range(1, workers):
            here, there = ctx.Pipe()
            self.conns[i] = here
            # the child inherits our ends of every pipe so far: it closes them, so that closing
            # ours (close()) ends its pipe
            proc = ctx.Process(
                target=_worker_main,
                args=(
                    module,
                    there,
                    list(self.conns.values()),
                    self.weights,
                    self.grads[i],
                    [d is not None for d in self.direct],
                ),
                name=f"scratchformer-replica-{i}",
                daemon=True,
            )
            try:
                proc.start()
            except OSError as e:  # EAGAIN: the process limit (ulimit -u, a cgroup's pids.max)
                there.close()
                self.close()
                raise ParallelWorkerError(
                    f"could not start worker process {i} of {workers - 1} ({e.strerror or e}): the system limits "
                    "the number of processes; lower --workers (1 trains in this process alone)"
                ) from None
            there.close()
            self.procs[i] = proc

    def stale(self) -> bool:
        """True if the parameters changed shape or dtype, or a weight the workers read in place was
        replaced (a FlatAdamW bound again): fresh workers are forked then."""
        if all(p.data is seen for p, seen in zip(self.params, self.seen)):
            return False  # the same arrays as at the last check (the usual step): nothing to compare
        if any(d is not None and p.data is not d for p, d in zip(self.params, self.direct)):
            return True
        self.seen = [p.data for p in self.params]  # copied weights moved (into an optimiser's buffer)
        return self.layout != _layout(self.params)

    def sync_weights(self) -> None:
        for p, shared in zip(self.copied, self.weights.arrays):
            np.copyto(shared, p.data)

    def jumped_states(self, i: int, training: bool) -> list[list]:
        """[position, state] for each generator (by its position among the distinct ones) that a
        forward in this mode draws from: none in eval mode, and none for dropout at rate 0
        (jumping each of a model's 17 generators cost half a millisecond a step)."""
        drawing = {id(m.rng) for m in self.rng_modules if training and m.dropout_rate > 0}
        generators = _distinct([m.rng for m in self.rng_modules])
        return [[pos, _jumped_state(rng, i)] for pos, rng in enumerate(generators) if id(rng) in drawing]

    def send_forward(self, i: int, args, kwargs, training: bool, outputs: bool = True) -> None:
        rng_states = self.jumped_states(i, training)
        self._send(
            i,
            {"op": "forward", "kwargs": kwargs, "rng": rng_states, "training": training, "outputs": outputs},
            args,
        )

    def send_backward(self, i: int, dloss: float) -> None:
        self._send(i, {"op": "backward", "dloss": dloss})

    def _send(self, i: int, header: dict, arrays=()) -> None:
        try:
            _send(self.conns[i], header, arrays)
        except OSError:
            self._stopped(i)

    def _stopped(self, i: int):
        self.procs[i].join(1)
        raise ParallelWorkerError(
            f"DataParallel worker {i} stopped (exit code {self.procs[i].exitcode}); "
            "run again with --workers 1 (train or eval) to use one process"
        ) from None

    def _wait(self, i: int) -> None:
        """Until worker i's answer is ready: at most `timeout` seconds from now (this process has
        done its own part by then), checking `interrupted` every _POLL_S."""
        deadline = time.monotonic() + self.timeout
        conn = self.conns[i]
        while not conn.poll(_POLL_S):
            if self.interrupted is not None and self.interrupted():
                raise WaitInterrupted(f"interrupted while waiting for DataParallel worker {i}")
            if time.monotonic() >= deadline:
                proc = self.procs[i]
                how = "has stopped or is stuck" if proc.is_alive() else f"exited with code {proc.exitcode}"
                raise ParallelWorkerError(
                    f"DataParallel worker {i} (pid {proc.pid}) {how}: no answer in "
                    f"{self.timeout:g} s; train with --workers 1 to run in one process"
                )

    def receive(self, i: int) -> dict:
        try:
            self._wait(i)
            header, arrays = _receive(self.conns[i])
        except (EOFError, OSError):
            self._stopped(i)
        if "error" in header:
            raise ParallelWorkerError(f"DataParallel worker {i}: {header['error']}")
        header["output"] = arrays[0] if arrays else None
        return header

    def add_gradients(self, i: int) -> None:
        for p, g in zip(self.params, self.grads[i].arrays):
            p.grad += g

    def close(self) -> None:
        """Stop the workers within about half a second: a worker reading its pipe sees it close
        and exits; one that does not (stopped, stuck, busy) is killed (SIGKILL: a stopped process
        would hold SIGTERM until continued, and multiprocessing's exit-time join would hang)."""
        for conn in self.conns.values():
            conn.close()
        deadline = time.monotonic() + 0.5
        for proc in self.procs.values():
            proc.join(max(deadline - time.monotonic(), 0.0))
        for proc in self.procs.values():
            if proc.is_alive():
                proc.kill()  # a worker ignores SIGTERM (below)
                proc.join(1)
        self.conns, self.procs = {}, {}


class _SharedParams:
    """One anonymous shared mmap holding an array per parameter (same shapes and dtypes)."""

    def __init__(self, params):
        sizes = [p.data.nbytes for p in params]
        self.buffer = mmap.mmap(-1, max(sum(sizes), 1))  # MAP_SHARED | MAP_ANONYMOUS: survives fork
        self.arrays, offset = [], 0
        for p, size in zip(params, sizes):
            self.arrays.append(np.ndarray(p.data.shape, p.data.dtype, self.buffer, offset))
            offset += size


def _worker_main(
    module: Module, conn, inherited, weights: _SharedParams, grads: _SharedParams, direct: list[bool]
) -> None:
    """A worker's life: the replica's parameters are views of the shared buffers (a weight already
    in shared memory stays the fork's view of it); answer forward/backward requests until the
    pipe closes."""
    for other in inherited:  # the main process's ends, copied by the fork
        other.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM (sent to the whole group by
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # systemd, Slurm) are for the training loop to handle
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    copied = iter(weights.arrays)
    for p, in_place, g in zip(module.parameters(), direct, grads.arrays):
        p.grad = g
        if not in_place:
            p.data = next(copied)
    # the replica's generators, distinct, in the main process's order (positions in its messages)
    generators = _distinct([m.rng for m in dropout_modules(module)])
    while True:
        try:
            header, arrays = _receive(conn)
        except (EOFError, OSError):
            return
        try:
            with trusted_calls():  # the door (DataParallel in the main process) checked the batch
                if header["op"] == "forward":
                    for pos, state in header["rng"]:
                        generators[pos].bit_generator.state = state
                    if module.training != header["training"]:  # the mode of the model, as it runs now
                        module.train(header["training"])
                    out, loss = module(*arrays, **header["kwargs"])
                    _send(conn, {"loss": loss}, [out] if header["outputs"] else [])
                    del out  # not kept while the backward runs: a GPT-2's logits are 100 MB
                else:
                    for g in grads.arrays:
                        g[...] = 0
                    module.backward(dloss=header["dloss"])
                    _send(conn, {})
        except Exception as e:  # report, and keep serving: the main process decides what happens
            _send(conn, {"error": f"{type(e).__name__}: {e}"})


def _layout(params) -> list:
    return [(p.data.shape, p.data.dtype.str) for p in params]


def _distinct(generators: list) -> list[np.random.Generator]:
    """Each generator once, in order (models often share one among their dropout layers); the
    order is the same in every replica, so worker i knows which state is whose."""
    seen, out = set(), []
    for rng in generators:
        if id(rng) not in seen:
            seen.add(id(rng))
            out.append(rng)
    return out


def _jumped_state(rng: np.random.Generator, i: int) -> dict:
    """The bit-generator state i * 2^127 draws ahead of rng's (which does not move). Bit
    generators without jumped() (SFC64) use a state seeded by one draw instead."""
    bits = rng.bit_generator
    jumped = bits.jumped(i) if hasattr(bits, "jumped") else type(bits)(rng.integers(2**63))
    return jumped.state


def _batch_first(a, batch: int) -> bool:
    return isinstance(a, np.ndarray) and a.ndim > 0 and a.shape[0] == batch


# -- messages: a JSON header and raw array bytes, never pickle ---------------------------------------
def _send(conn, header: dict, arrays=()) -> None:
    arrays = [np.ascontiguousarray(a) for a in arrays]
    header = {**header, "arrays": [[list(a.shape), a.dtype.str] for a in arrays]}
    head = json.dumps(header).encode()
    conn.send_bytes(b"".join([len(head).to_bytes(8, "little"), head] + [a.tobytes() for a in arrays]))


def _receive(conn) -> tuple[dict, list[np.ndarray]]:
    message = conn.recv_bytes()
    size = int.from_bytes(message[:8], "little")
    header = json.loads(message[8 : 8 + size])
    arrays, offset = [], 8 + size
    for shape, dtype in header.pop("arrays"):
        a = np.frombuffer(message, dtype=dtype, count=int(np.prod(shape, dtype=np.int64)), offset=offset)
        arrays.append(a.reshape(shape))
        offset += a.nbytes
    return header, arrays


# -- shared memory: what a forked worker shares instead of copying ------------------------------------
_SHARED: weakref.WeakSet = weakref.WeakSet()  # the mmaps made here


def _shared_empty(shape, dtype) -> np.ndarray:
    """An uninitialised array in anonymous shared memory (mmap MAP_SHARED | MAP_ANONYMOUS): a
    process forked later sees this one's writes to it, and writing it copies no page."""
    dtype, shape = np.dtype(dtype), tuple(shape)
    count = math.prod(shape)
    buffer = mmap.mmap(-1, max(count * dtype.itemsize, 1))
    _SHARED.add(buffer)
    flat = np.frombuffer(buffer, dtype=dtype, count=count)  # views' .base is flat (numpy collapses the chain)
    return flat if len(shape) == 1 else flat.reshape(shape)


def _owner(a: np.ndarray) -> np.ndarray:
    """The array that owns a's memory (the end of its chain of .base arrays)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def is_shared(a: np.ndarray) -> bool:
    """Whether a's memory was made by this module's shared memory (share_memory)."""
    base = _owner(a).base
    if isinstance(base, memoryview):
        base = base.obj
    return base is not None and base in _SHARED


def _shared_copy(a: np.ndarray) -> np.ndarray:
    """a's values in a new array of its shape and dtype in shared memory."""
    copy = _shared_empty(a.shape, a.dtype)
    np.copyto(copy, a)
    return copy


def share_memory(optimizer, params) -> int:
    """Move what a forked worker should share instead of copy into shared memory, bit for bit:
    first the arrays `optimizer` declares (`state_arrays()`), which it takes back as shared
    copies (`adopt_state_arrays()`; a FlatAdamW points its parameters' views at them), then the
    `.data` and `.grad` of each of `params` not in shared memory yet. Arrays already shared are
    left alone. Returns the bytes moved."""
    moved = {name: _shared_copy(a) for name, a in optimizer.state_arrays().items() if not is_shared(a)}
    optimizer.adopt_state_arrays(moved)
    nbytes = sum(a.nbytes for a in moved.values())
    for p in params:
        if not is_shared(p.data):
            p.data = _shared_copy(p.data)
            nbytes += p.data.nbytes
        if not is_shared(p.grad):
            p.grad = _shared_copy(p.grad)
            nbytes += p.grad.nbytes
    return nbytes
