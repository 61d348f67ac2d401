"""Whole machines and workloads beyond one kernel: the decoder shape, a model's pipeline over wafer
regions and its decode cost, GPU clusters, power and cost, and serving on both."""
