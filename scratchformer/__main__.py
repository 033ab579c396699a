"""`python -m scratchformer ...` is the `scratchformer` command."""

import sys

from scratchformer.cli.main import main

sys.exit(main())
