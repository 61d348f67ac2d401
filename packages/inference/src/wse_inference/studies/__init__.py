"""Experiments of the inference package: `hotchips24_inference`, `leviathan23_speculative`
(with `speculative_timing`, the timer of the loops speculative decoding runs)."""
