"""Fixtures shared by the test folders, and the test helpers' folder on the import path.

Tests live in one folder per unit they test (tests/ops, tests/nn, tests/models, ... as the
package's layers, docs/architecture.md); the helpers beside this file (tiny_bert.py,
model_state.py, json_edits.py, torch_ablation.py, tiny_run.py) are imported by name from any of them.
"""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# A few test modules reuse another folder's builders (test_viz_report draws the runs of
# test_diagnostics, test_lens_llama the checkpoints of test_llama_interop): every folder is on
# the path, whichever test runs first.
sys.path[1:1] = [
    str(d) for d in sorted(HERE.iterdir()) if d.is_dir() and d.name not in ("data", "__pycache__")
]

from scratchformer import fast  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def one_blas_thread_per_worker():
    """Under pytest-xdist (`-n auto`: a worker per core), each worker's NumPy on one BLAS thread:
    the workers fill the cores already, and two OpenBLAS threads per worker on them spin against
    each other (docs/performance.md, "Threads and processes"). A run in one process (`-n 0`) keeps
    the default. The commands a worker's tests start as subprocesses get one thread too (the
    environment's OPENBLAS_NUM_THREADS and OMP_NUM_THREADS, PyTorch's included), for the same reason."""
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    from threadpoolctl import threadpool_limits

    saved = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def one_blas_thread():
    """NumPy's BLAS on one thread for a test that trains for hundreds of steps on small products:
    OpenBLAS's thread pool costs far more than it saves there (the induction bars, 700 steps of a
    40K-parameter model: 158 s of CPU with its default two threads on a loaded 2-core machine, 9 s
    on one). Subprocesses keep the default, as a user's command does."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(params=["fast", "reference"])
def lane(request):
    """Runs the test once in each lane (docs/performance.md): the fast variants, then the
    reference formulas alone. Files where every test runs in both lanes say
    `pytestmark = pytest.mark.usefixtures("lane")`."""
    with fast.reference(request.param == "reference"):
        yield request.param


@pytest.fixture(scope="module")
def one_torch_thread():
    """PyTorch on one thread for a module whose comparisons are tiny: its thread pool costs
    more than the arithmetic, and the float64 references need no speed."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
