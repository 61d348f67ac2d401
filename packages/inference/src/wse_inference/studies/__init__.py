"""Experiments of the inference package: `hotchips24_inference`, `leviathan23_speculative`."""
