"""interop/saelens.py: an autoencoder saved in SAELens's layout is loaded by SAELens itself
(SAE.load_from_disk, in a process of its own: tests/interop/saelens_shim.py says why a shim) and
computes our features and reconstruction; our own reader reads it back."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scratchformer.errors import CheckpointError
from scratchformer.interop.saelens import load_saelens, save_saelens
from scratchformer.models.sae import SAEConfig, SparseAutoencoder

SHIM = Path(__file__).with_name("saelens_shim.py")
D, S = 6, 20


def _trained_like(kind, dtype):
    """An autoencoder whose decoder rows have norms far from 1 and whose biases are not 0 (what
    training leaves), so the topk kind's folding shows."""
    sae = SparseAutoencoder(SAEConfig(kind=kind, d_in=D, d_sae=S, k=4, dtype=dtype), seed=1)
    rng = np.random.default_rng(2)
    for p in (sae.W_enc, sae.b_enc, sae.b_dec):
        p.data[...] = rng.standard_normal(p.shape)
    sae.W_dec.data[...] = rng.standard_normal((S, D)) * rng.uniform(0.2, 3.0, (S, 1))
    return sae.eval()


KINDS = {"topk": "TopKSAE", "relu": "StandardSAE"}
X = np.random.default_rng(3).standard_normal((7, D)) * 2


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Both kinds saved, then loaded and run by SAELens in one process: {kind: (our sae, its dir)}."""
    root = tmp_path_factory.mktemp("saelens")
    saved = {}
    for kind in KINDS:
        sae = _trained_like(kind, "float64")
        saved[kind] = (sae, save_saelens(sae, root / kind, "blocks.1.resid_post", "tiny", context_size=16))
    np.save(root / "x.npy", X)
    subprocess.run(
        [sys.executable, str(SHIM), str(root / "x.npy"), *(str(d) for _, d in saved.values())], check=True
    )
    return saved


@pytest.mark.parametrize("kind", KINDS)
def test_saelens_loads_it_and_computes_the_same(loaded, kind):
    sae, path = loaded[kind]
    cfg = json.loads((path / "cfg.json").read_text())
    assert cfg["d_in"] == D and cfg["d_sae"] == S and cfg["metadata"]["hook_name"] == "blocks.1.resid_post"
    assert (path / "class.txt").read_text().split() == [KINDS[kind], "blocks.1.resid_post"]
    np.testing.assert_allclose(np.load(path / "acts.npy"), sae.encode(X), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.load(path / "x_hat.npy"), sae.decode(sae.encode(X)), rtol=1e-10, atol=1e-10)
    back = load_saelens(path)
    np.testing.assert_allclose(back.decode(back.encode(X)), sae.decode(sae.encode(X)), rtol=1e-10, atol=1e-10)


def test_a_directory_that_is_not_one_is_one_line(tmp_path):
    with pytest.raises(CheckpointError, match="not a SAELens SAE directory"):
        load_saelens(tmp_path)
    (tmp_path / "cfg.json").write_text('{"architecture": "jumprelu"}')
    with pytest.raises(CheckpointError, match="jumprelu"):
        load_saelens(tmp_path)
