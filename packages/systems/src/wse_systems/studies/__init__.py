"""Experiments of whole systems: the cost model's calibration with its LLM decode check."""
