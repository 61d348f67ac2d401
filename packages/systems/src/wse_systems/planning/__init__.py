"""`wse plan`'s answers: wafers against GPUs for training and serving, from a resolved model and
wafer (the CLI parses, calls and prints)."""
