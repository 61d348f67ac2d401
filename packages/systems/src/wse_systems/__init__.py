"""Whole LLM systems priced, above the wafer core: decoder shapes, a model's pipeline over
wafer regions and its decode cost, GPU clusters, power and cost, serving on both, the
predicted training step, and the planners behind `wse plan`.

Dependency rule: `wse_systems` imports `wse_core` only; the workload packages and the CLI
may import it, `wse_core` never does.
"""
