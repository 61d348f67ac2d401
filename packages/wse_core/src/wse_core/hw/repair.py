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
(`max_repairable_rate`) and the fewest spare columns or rows a spec may hold
(`spare_cols_needed`, `spare_rows_needed`: at most pe_cols, pe_rows) that would repair it;
`repaired_grid_note(spec)` says what a plan that passes assumes. `require_repairable(spec)`
is the same refusal at the edge of every command that prices a spec (`wse_cli.wafer_choice`):
a bound settles a wafer that surely repairs without the closed form's scipy import.
"""

from __future__ import annotations

import math

from wse_core.errors import DefectError
from wse_core.hw.spec import WaferSpec

__all__ = [
    "REPAIR_PROBABILITY",
    "predicted_repairable",
    "repair_probability",
    "max_repairable_rate",
    "spare_cols_needed",
    "spare_rows_needed",
    "check_repairable",
    "surely_repairs",
    "require_repairable",
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
    `probability` at its defect rate; None: no count a spec may hold does (at most pe_cols,
    `refuse_past_the_grid`; hunt 69: 1,332 was suggested on a 1,176-column WSE-3)."""
    return _fewest(spec, "spare_cols", spec.pe_cols, probability)


def spare_rows_needed(spec: WaferSpec, probability: float = REPAIR_PROBABILITY) -> int | None:
    """`spare_cols_needed` for the spare rows (at most pe_rows), its spare columns kept."""
    return _fewest(spec, "spare_rows", spec.pe_rows, probability)


def _fewest(spec: WaferSpec, field: str, most: int, probability: float) -> int | None:
    """The fewest `field` in [its value, `most`] with which `spec` repairs (bisection: more
    spares never repair less often), None if `most` does not."""

    def ok(count: int) -> bool:
        return repair_probability(spec.replace(**{field: count})) >= probability

    lo = getattr(spec, field)
    hi = max(lo, most)  # a grid shrunk under a preset may hold more already
    if not ok(hi):
        return None
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
    raise DefectError(
        f"wafer {spec.name} does not repair to its {spec.pe_rows} x {spec.pe_cols} PE grid at "
        f"defect_rate {spec.defect_rate:g}: {per_row:.3g} dead PEs expected per physical row "
        f"of {spec.physical_cols:,}, {spec.spare_cols} spare columns and {spec.spare_rows} spare "
        f"rows repair it with probability {p:.3g} (wse_core.hw.repair; a plan needs at least "
        f"{probability:g}); give {_remedies(spec, probability)}"
    )


def _remedies(spec: WaferSpec, probability: float) -> str:
    """What would repair `spec`: the largest defect rate, and the fewest spare columns or
    rows that do alone within the grid (as a value a spec file takes), or that none does."""
    fixes = [f"defect_rate <= {max_repairable_rate(spec, probability):.3g}"]
    nones = []
    for field, side, count in (
        ("spare_cols", spec.pe_cols, spare_cols_needed(spec, probability)),
        ("spare_rows", spec.pe_rows, spare_rows_needed(spec, probability)),
    ):
        if count is None:
            nones.append(f"no {field} <= {max(side, getattr(spec, field)):,}")
        else:
            fixes.append(f"{field} >= {count}")
    return " or ".join(fixes) + ("" if len(fixes) > 1 else f" ({' and '.join(nones)} repairs it)")


def surely_repairs(spec: WaferSpec, probability: float = REPAIR_PROBABILITY) -> bool:
    """True when a bound alone shows that `spec`'s wafer repairs with at least `probability`
    (False: the closed form must decide). A row is lost only with more than spare_cols dead
    PEs: at most exp(-n D(a || rate)) for a = (spare_cols + 1) / n of its n PEs (Chernoff);
    the wafer fails only if some row is lost (union bound over its physical rows). Settles
    every preset without scipy."""
    rate, n = spec.defect_rate, spec.physical_cols
    a = (spec.spare_cols + 1) / n
    if rate <= 0.0 or a > 1.0:  # no dead PE, or more spare columns than a row has PEs
        return True
    if a <= rate:
        return False
    tail = a * math.log(a / rate) + (0.0 if a == 1.0 else (1 - a) * math.log((1 - a) / (1 - rate)))
    return math.log(spec.physical_rows) - n * tail <= math.log(1.0 - probability)


def require_repairable(spec: WaferSpec) -> WaferSpec:
    """`spec`, if its wafer repairs with at least `REPAIR_PROBABILITY` (else
    `check_repairable`'s DefectError): what a command that prices `spec`'s logical grid
    checks at its edge (hunt 69: `wse train`, `wse infer generate` and `wse hpc` priced a
    wafer that repairs with probability 0, where `wse plan` refused it)."""
    if not surely_repairs(spec):
        check_repairable(spec)
    return spec


def repaired_grid_note(spec: WaferSpec) -> str:
    """What a plan on `spec`'s logical grid assumes of its repair (after `check_repairable`)."""
    p = repair_probability(spec)
    return (
        f"wafer grid: the logical {spec.pe_rows} x {spec.pe_cols} PEs of a repaired {spec.name} "
        f"(its {spec.spare_cols} spare columns and {spec.spare_rows} spare rows hide the dead "
        f"PEs at defect_rate {spec.defect_rate:g}; it repairs with probability {p:.3g}, "
        "wse_core.hw.repair); the detours around dead PEs are not priced"
    )
