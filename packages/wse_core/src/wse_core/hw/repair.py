"""Whether a spec's wafer repairs to its logical grid: the closed form of its two-level repair.

Contract. `wse_core.hw.defects.remap` keeps a physical row whose dead PEs are at most
`spare_cols` (its spare columns absorb the shift) and retires the others, which the
`spare_rows` replace. With PEs dead independently at `defect_rate`, a row keeps with
probability q = BinomCDF(spare_cols; physical_cols, rate), and the wafer repairs with
probability `predicted_repairable` = BinomCDF(spare_rows; physical_rows, 1 - q) (experiment
`wafer-yield` measures it on seeded draws).

A plan priced on a spec's logical grid (`wse plan train`, `wse plan infer`) assumes that its
wafer repairs. `check_repairable(spec)` refuses (DefectError, one line) a spec whose wafer
repairs with a probability below `REPAIR_PROBABILITY`, and names the largest defect rate
(`max_repairable_rate`) and the fewest spare columns (`spare_cols_needed`) that would repair
it; `repaired_grid_note(spec)` says what a plan that passes assumes.
"""

from __future__ import annotations

from wse_core.errors import DefectError
from wse_core.hw.description import MAX_PE_SIDE
from wse_core.hw.spec import WaferSpec

__all__ = [
    "REPAIR_PROBABILITY",
    "predicted_repairable",
    "repair_probability",
    "max_repairable_rate",
    "spare_cols_needed",
    "check_repairable",
    "repaired_grid_note",
]

# A plan prices the logical grid of a wafer that repairs at least this often: more likely
# than not (the median wafer of the spec repairs). Expected dead PEs per row against the spare
# columns is no criterion: at that mean a row keeps about half the time, and a WSE-3 without
# spare rows needs all 762 rows kept.
REPAIR_PROBABILITY = 0.5


def predicted_repairable(
    rows: int, cols: int, spare_rows: int, spare_cols: int, rate: float
) -> float:
    """Closed-form probability that a wafer of `rows` x `cols` PEs (spares excluded) repairs."""
    if rate <= 0.0:
        return 1.0
    from scipy import stats  # imported here: a plan of a perfect wafer never needs it

    q = stats.binom.cdf(spare_cols, cols + spare_cols, rate)
    return float(stats.binom.cdf(spare_rows, rows + spare_rows, 1.0 - q))


def repair_probability(spec: WaferSpec, rate: float | None = None) -> float:
    """The probability that a wafer of `spec` (at `rate`, default its `defect_rate`) repairs."""
    rate = spec.defect_rate if rate is None else rate
    return predicted_repairable(spec.pe_rows, spec.pe_cols, spec.spare_rows, spec.spare_cols, rate)


def max_repairable_rate(spec: WaferSpec, probability: float = REPAIR_PROBABILITY) -> float:
    """The largest defect rate at which `spec`'s wafer repairs with at least `probability`
    (bisection: the probability falls as the rate grows); to 3 significant digits or better."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if repair_probability(spec, mid) >= probability else (lo, mid)
    return lo


def spare_cols_needed(spec: WaferSpec, probability: float = REPAIR_PROBABILITY) -> int | None:
    """The fewest spare columns with which `spec`'s wafer repairs with at least
    `probability` at its defect rate (None: not within `MAX_PE_SIDE`)."""

    def ok(cols: int) -> bool:
        return repair_probability(spec.replace(spare_cols=cols)) >= probability

    if not ok(MAX_PE_SIDE):
        return None
    lo, hi = spec.spare_cols, MAX_PE_SIDE
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def check_repairable(spec: WaferSpec, probability: float = REPAIR_PROBABILITY) -> float:
    """`spec`'s repair probability if at least `probability`; else DefectError saying by how
    much it misses and what would repair it."""
    p = repair_probability(spec)
    if p >= probability:
        return p
    per_row = spec.defect_rate * spec.physical_cols
    more = spare_cols_needed(spec, probability)
    cols = f" or spare_cols >= {more}" if more is not None else ""
    raise DefectError(
        f"wafer {spec.name} does not repair to its {spec.pe_rows} x {spec.pe_cols} PE grid at "
        f"defect_rate {spec.defect_rate:g}: {per_row:.3g} dead PEs expected per physical row "
        f"of {spec.physical_cols:,}, {spec.spare_cols} spare columns and {spec.spare_rows} spare "
        f"rows repair it with probability {p:.3g} (wse_core.hw.repair; a plan needs at least "
        f"{probability:g}); give defect_rate <= {max_repairable_rate(spec, probability):.3g}"
        f"{cols}"
    )


def repaired_grid_note(spec: WaferSpec) -> str:
    """What a plan on `spec`'s logical grid assumes of its repair (after `check_repairable`)."""
    p = repair_probability(spec)
    return (
        f"wafer grid: the logical {spec.pe_rows} x {spec.pe_cols} PEs of a repaired {spec.name} "
        f"(its {spec.spare_cols} spare columns and {spec.spare_rows} spare rows hide the dead "
        f"PEs at defect_rate {spec.defect_rate:g}; it repairs with probability {p:.3g}, "
        "wse_core.hw.repair); the detours around dead PEs are not priced"
    )
