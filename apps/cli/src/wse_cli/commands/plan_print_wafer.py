"""How `wse plan infer` says the wafer side's placement and precision: the wafers of a
replica with their regions' layout, stage count and, where a plan takes a band of each
wafer's PE rows (a footprint), where the band lies (`PipelinePlan.footprint`: its origin and
the rows above and below it); a speculative plan's draft band in a row of its own; the
weights' and KV's dtype, the draft's beside the target's. Read off the plan's JSON
(`wse_systems.planning.infer.ServingPlan.to_dict`); nothing here plans. `plan_print` prints
the rows (session 86: where a footprint lay and the draft's dtype were not said).
"""

from __future__ import annotations

__all__ = ["draft_rows", "dtypes", "wafers"]


def wafers(w: dict) -> str:
    """Wafers per replica, their regions' layout (banded or compact), stage count and the
    PE rows of each wafer they take where fewer than the wafer's (a footprint), chosen at
    each load with the placement (`wse_systems.serving.placements`)."""
    layout = w.get("point", {}).get("layout", {})
    regions, stages = layout.get("layout"), layout.get("stages")  # stages: searched (hunt 75)
    part = _footprint(layout.get("footprint"), layout.get("wafer_pe_rows"))
    said = ", ".join(x for x in (regions, stages and f"{stages} stages", part) if x)
    if layout.get("not_held"):  # hunt 82: why this load is served in another arrangement
        said += f"; the load is not held by {layout['not_held']}"
    return f"{w['wafers_per_replica']} x {w['system']}" + (f" ({said})" if said else "")


def _footprint(at: dict | None, whole: int | None) -> str:
    """Where a plan lies on each wafer (`PipelinePlan.footprint`) where it is a footprint,
    fewer PE rows than the wafer's `whole` (session 86: its rows were said, not where they
    lie); "" on the whole wafer."""
    if not at or not whole or at["pe_rows"] >= whole:
        return ""
    return (f"{at['pe_rows']:,} of {whole:,} PE rows from row {at['row0']:,}, col "
            f"{at['col0']:,}: {at['rows_above']:,} rows above, {at['rows_below']:,} "
            "below")  # fmt: skip


def draft_rows(w: dict) -> list[tuple[str, str, str]]:
    """A speculative plan's draft: where it lies on each wafer (its footprint; session 86)."""
    layout = w["point"]["layout"]
    at, whole = layout.get("draft_footprint"), layout.get("wafer_pe_rows")
    if not at:
        return []
    return [("draft per replica", _footprint(at, whole) or "the whole wafer", "shares the GPUs")]


def dtypes(inputs: dict) -> str:
    """The wafer's weights and KV: the target's dtype, and a draft's beside it with its bytes
    a value (session 86: the draft's, its folder's own, was not said)."""
    if "draft_dtype" not in inputs:
        return inputs["wafer_dtype"]
    return (f"{inputs['wafer_dtype']} ({inputs['wafer_bytes_per_param']} B a value); draft "
            f"{inputs['draft_dtype']} ({inputs['draft_bytes_per_param']} B)")  # fmt: skip
