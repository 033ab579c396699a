"""How a script stops on a library error: one line on stderr and exit code 2, as the CLI does
(a bad run directory, a split too small), never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

from scratchformer.errors import ScratchformerError


def run(main: Callable[[], None]) -> None:
    try:
        main()
    except ScratchformerError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
