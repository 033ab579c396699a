"""Load saved SAEs with SAELens and run them: `python saelens_shim.py X.npy SAE_DIR...` writes,
into each SAE_DIR, acts.npy (sae.encode(x)), x_hat.npy (sae.decode(acts)) and class.txt (the
class SAE.load_from_disk built, and its hook name). Run in a process of its own by
tests/interop/test_saelens_interop.py.

Why a shim. sae-lens 6.51.1 (the release installed beside transformer-lens 4.3.0, which the
TransformerBridge work here needs) cannot be imported with TransformerLens 4: its package
__init__ imports its whole training and analysis stack, which imports
`transformer_lens.HookedTransformer`, a module TransformerLens 4 removed (newer sae-lens
releases pin transformer-lens < 4). The part this test needs, SAELens's SAE classes and its disk
loader (sae_lens/saes/*.py, sae_lens/loading/*.py), needs only `HookedRootModule` and
`HookPoint`, which TransformerLens 4 keeps (`transformer_lens.HookedRootModule`,
`transformer_lens.hook_points`). So this process:

1. gives TransformerLens 4's own `HookedRootModule` class the module path sae-lens imports it
   from (`transformer_lens.HookedTransformer`), nothing else in that module;
2. registers the `sae_lens` package without running its __init__, doing what that __init__
   does for loading an SAE: the two names the SAE classes read from it, `__version__` (the
   installed distribution's version) and `logger` (logging.getLogger("sae_lens")), and the
   registration of the two architectures saved here (`register_sae_class("standard",
   StandardSAE, StandardSAEConfig)`, the same for "topk"), with SAELens's own registry and classes.

Every class and function that loads and runs the SAE is SAELens's own, unchanged. Weighed
against a second virtual environment with transformer-lens < 4 (a second torch install and
sae-lens's dependencies, minutes of CI time and a network at test time), this costs nothing and
tests the same code; it would stop working if SAELens's SAE modules began to import more of
the removed API, and then fails loudly (ImportError), never silently.
"""

import importlib.metadata
import importlib.util
import logging
import sys
import types
from pathlib import Path


def install() -> None:
    from transformer_lens.HookedRootModule import HookedRootModule

    moved = types.ModuleType("transformer_lens.HookedTransformer")
    moved.HookedRootModule = HookedRootModule
    sys.modules["transformer_lens.HookedTransformer"] = moved
    spec = importlib.util.find_spec("sae_lens")
    package = types.ModuleType("sae_lens")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    package.__version__ = importlib.metadata.version("sae-lens")
    package.logger = logging.getLogger("sae_lens")
    sys.modules["sae_lens"] = package
    from sae_lens.registry import register_sae_class
    from sae_lens.saes.standard_sae import StandardSAE, StandardSAEConfig
    from sae_lens.saes.topk_sae import TopKSAE, TopKSAEConfig

    register_sae_class("standard", StandardSAE, StandardSAEConfig)
    register_sae_class("topk", TopKSAE, TopKSAEConfig)


def main(x_path: str, *sae_dirs: str) -> None:
    install()
    import numpy as np
    import torch
    from sae_lens.saes.sae import SAE

    for sae_dir in sae_dirs:
        sae = SAE.load_from_disk(sae_dir, device="cpu")
        x = torch.tensor(np.load(x_path))
        with torch.no_grad():
            acts = sae.encode(x.to(sae.W_enc.dtype))
            x_hat = sae.decode(acts)
        out = Path(sae_dir)
        np.save(out / "acts.npy", acts.numpy())
        np.save(out / "x_hat.npy", x_hat.numpy())
        (out / "class.txt").write_text(f"{type(sae).__name__} {sae.cfg.metadata.hook_name}\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
