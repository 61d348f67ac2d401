"""Experiments of the wafer core: `wafer_yield` and `fabric_collectives` (see
`wse_core.studies.experiment` for the output format and apps/cli for the registry)."""
