"""The `scratchformer` command line."""
