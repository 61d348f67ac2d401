"""The wafer cost of a placed TLR-MVM, priced instruction by instruction from its plan, and
the matrix-vector bandwidth in the accounting Cerebras reports.

Contract. `pe_tiles(plan)` (`pe_programs`) lists what each PE's program multiplies in one
product, grouped by PEs that run the same program: phase 1 (V^H x) and phase 3 (U y) as fp32
`Tile`s, padding rows included, both the column-AXPY GEMV of the SDK's `single-tile-matvec`
(one `@fmacs` per column): phase 3 over U's columns (2 nb long), phase 1 over the columns of
the PE's piece of the transposed V stack (as ecrc/tlrmvm stores it: 2 k long for the k rank
rows the PE holds per x piece, 2 nb of them); the row-dot form of phase 1 (one DSD of 2 nb
elements per row into one accumulator, ours) is priced beside it (`phase1_alternative`;
`pe_programs` and docs/references/tlr-pe-program.md say why).
`mvm_phases(wafer, plan, op)` builds the `wse_core.cost.perf.Phases` of one product: the x pieces
in, phase 1, the reshuffle, phase 3 and the final sum (band sum, column or row allreduce),
each phase's fabric words per link direction and hops from the traffic ledger of the
layout's own `matvec_fn` traced on the wafer (`fabric` records them at trace time), each
phase's compute and SRAM on its busiest PE; host I/O (x in, y out) overlaps the product (a
stream of MVMs moves the next x while the wafer computes). `predict(...)` prices them with
the one `PerfModel` and its one calibration into a `wse_core.cost.report.RunReport` whose `extra`
holds `cerebras_bandwidth(...)` and the model's own figure; `product_s(plan, spec)`: the
predicted seconds of one product alone, the price by which `grouped_plan.plan_grouped` chooses.

Complex data is split into real arithmetic as the emulator does (`grouped`'s interleaved pairs,
`pe_kernels`): a complex (m x n) tile product is one real (2m x 2n) tile product [[Re, -Im],
[Im, Re]] [x_re; x_im]. `cerebras_bandwidth` applies the SDK's accounting to every real tile
(relative bytes 4mn + 4m + 4n, absolute 12mn + 4n for the column AXPY and 8mn + 4m for the row
dots, flops 2mn - m; for nb x nb: 4nb^2 + 8nb, 12nb^2 + 4nb, 2nb^2 - nb): time = the slowest
PE's cycles of phases 1 and 3 / 850e6; bytes in the SDK's rule = the average tile PE's bytes
times the 750 x 994 rectangle per system (the main figure), and beside it the bytes of every
tile-holding PE, over the copies of the operator in each system. The bytes are those the
plan's PEs hold (`bytes_convention`): a plan of a complex operator holds complex64 ("held",
8 mn bytes per complex m x n tile: half of the real tiles' count); a plan made with
`real_split=True` holds each complex tile as the real 2m x 2n tile the SDK's
single-tile-matvec would store ("real-split", 16 mn bytes), its planner having sized the rank
chunk for those bytes against the same SRAM (a smaller chunk, more PEs). Both run the same
programs (`pe_programs`: the real tile product, whatever the storage), each at its own tiles'
shapes and slowest PE: a convention is priced on its own plan, never on the other's (the
real-split bytes credited to a held plan's PEs were 69 kB of a 48 kB SRAM on SC23's case). The
GEMV is priced at its own instructions' rates (`Op.bounds`): one fp32 FMAC DSD per column
(both phases; the alternative: per row into one accumulator in phase 1), each paying
`dsd_issue_cycles`. Nothing here is fitted to a published result.

Per PE (`pe_trace(wafer, plan, report)`, `wse hpc tlrmvm run --trace FILE`): phases 1 and 3
run each PE's own program (`pe_weights`: its cycles over the busiest PE's); x in, the
reshuffle (a periodic ring multicast: every PE sends and receives its w values per slot)
and the final sum move the same words on every PE of the grid; the regions are the PE
rows' groups of tile columns (grouped) or the whole grid.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import NamedTuple

import jax
import numpy as np
from wse_core.cost.perf import Op, PerfModel, Phase, Phases, Timing, Work, overlap, serial
from wse_core.cost.report import RunReport
from wse_core.errors import is_finite, is_int, shown_setting
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region
from wse_core.hw.traffic import Traffic
from wse_core.hw.wafer import Wafer, build_wafer
from wse_core.trace import PeTrace, trace_from

from wse_hpc.tlrmvm.bandwidth import (
    PROGRAM_RECTANGLE,
    SDK_CLOCK_HZ,
    bytes_convention,
    cerebras_bandwidth,
    copies_per_system,
)
from wse_hpc.tlrmvm.compress import TlrError, TlrOperator
from wse_hpc.tlrmvm.grouped import tlrmvm_grouped
from wse_hpc.tlrmvm.grouped_plan import GroupedPlan
from wse_hpc.tlrmvm.packed import PackedPlan, tlrmvm_packed
from wse_hpc.tlrmvm.pe_programs import (
    PHASE1_ALTERNATIVE,
    PHASE1_FORM,
    PeProgram,
    Tile,
    pe_tiles,
    pe_weights,
    real_pairs,
)
from wse_hpc.tlrmvm.wafer import TlrBases, TlrFns, TlrPlan, tlrmvm

__all__ = [
    "SDK_CLOCK_HZ",
    "PROGRAM_RECTANGLE",
    "ASSUMPTIONS",
    "Tile",
    "PeProgram",
    "Deployment",
    "pe_tiles",
    "mvm_phases",
    "predict",
    "product_s",
    "bytes_convention",
    "cerebras_bandwidth",
    "copies_per_system",
    "counting_fns",
    "fabric_by_phase",
    "pe_weights",
    "pe_trace",
]


ASSUMPTIONS = {
    "tlrmvm complex": "a complex (m x n) tile is one real (2m x 2n) fp32 tile "
    "[[Re, -Im], [Im, Re]], as the emulator stores it (the paper's split is not public)",
    "tlrmvm kernel": "phases 1 and 3 are the column-AXPY GEMV of the SDK's single-tile-matvec "
    "(one fp32 FMAC DSD per column, each paying the issue): phase 3 over U's columns (2 nb "
    "long), phase 1 over the PE's piece of the transposed V stack as ecrc/tlrmvm stores it "
    "(columns down the 2 k real rank rows the PE holds per x piece, 2 nb columns); the SC23 "
    "text could not be read here. Alternative reported beside (`phase1_alternative`): one DSD "
    "per V^H row of 2 nb elements into one fp32 accumulator. Columns unpadded (the SDK pads "
    "to 16 B; the plans fill the SRAM without it); each PE over all its stored rows",
    "tlrmvm strip order": "where the PEs' strips sit (serpentine or not) is not in what could "
    "be read: single-tile-matvec moves no data between PEs and the SDK's accounting times "
    "phases 1 and 3 only; the model's own figure moves x in, the reshuffle and the y sum as "
    "the layout's traced product does (row-major strips)",
    "tlrmvm receive": "every word a PE receives is moved into its SRAM by one fp32 move DSD",
    "tlrmvm sums": "an allreduce adds two incoming partials on its busiest PE; a band sum "
    "adds one per band row below",
    "tlrmvm host I/O": "x in and y out overlap the product (a stream of MVMs); copies of "
    "the operator on one system share its I/O",
    "tlrmvm batch": "a product of B vectors (--batch) runs each PE's GEMVs once per vector, "
    "reading its tiles from SRAM each time (no cache between vectors): the time is the "
    "product's, and the model's bytes count the bases B times, as the SDK accounting does",
    "tlrmvm cerebras accounting": "time = slowest PE's cycles of phases 1 and 3 / 850e6; "
    "bytes the plan's PEs hold: complex64, or the real (2m x 2n) tiles on a plan sized for "
    "them (real_split); the SDK's rule scales the average tile PE to the 750 x 994 "
    "rectangle, the other figure counts every PE that holds tiles, in every copy and system",
}


# -- the fabric: the layout's own product traced on the wafer ----------------------------
FABRIC_PHASES = {  # traffic-ledger op name -> phase, per layout
    "grouped": {"broadcast_row": "x_in", "multicastS": "reshuffle", "allreduce_sum": "y_sum"},
    "packed": {"broadcast_col": "x_in", "multicastE": "reshuffle", "allreduce_sum": "y_sum"},
    "banded": {"broadcast_col": "x_in", "multicastE": "reshuffle", "multicastN": "y_sum"},
}


def counting_fns(wafer: Wafer, plan) -> TlrFns:
    """The layout's product functions, to trace (grouped: the XLA kernel, whose fabric
    ops are the PE kernel's)."""
    if isinstance(plan, GroupedPlan):  # the fabric ops are the same for every kernel
        return tlrmvm_grouped(wafer, plan, kernel="xla")
    return (tlrmvm_packed if isinstance(plan, PackedPlan) else tlrmvm)(wafer, plan)


def _bases_struct(wafer: Wafer, plan) -> TlrBases:
    """Abstract placed bases of the plan (shapes and dtypes of `plan.fields`)."""
    (w, nb, dt), (pr, pc) = (plan.rank_chunk, plan.nb, np.dtype(plan.dtype)), wafer.padded_shape
    if isinstance(plan, GroupedPlan):
        per = (w, real_pairs(plan) * nb)
        dt = np.dtype(np.float32) if real_pairs(plan) == 2 else dt
        vh, u = per, per
    else:
        nt, ch = plan.tiles[1], plan.chunk
        vh, u = (w, nb), ((ch, nt, w) if isinstance(plan, PackedPlan) else (ch, nt * w))
    return TlrBases(
        *(jax.ShapeDtypeStruct((pr, pc, *s), dt, sharding=wafer.sharding(len(s))) for s in (vh, u))
    )


def fabric_by_phase(wafer: Wafer, plan, fns: TlrFns | None = None) -> dict[str, Traffic]:
    """The traffic of one product per phase: `matvec_fn` traced abstractly, each ledger
    entry assigned to its phase by its op (FABRIC_PHASES)."""
    fns = fns or counting_fns(wafer, plan)
    x = jax.ShapeDtypeStruct((plan.shape[1], plan.batch), np.dtype(plan.dtype))
    with wafer.traffic.scope() as entries:
        # a fresh function each time: eval_shape caches traces by function, and a cached
        # trace records nothing (the ledger fills at trace time)
        jax.eval_shape(lambda *a: fns.matvec_fn(*a), _bases_struct(wafer, plan), x)  # type: ignore[operator]
    names = FABRIC_PHASES[plan.layout]
    out: dict[str, Traffic] = {}
    for e in entries:
        phase = names[e.op]  # an op this table does not know is a KeyError: keep it true
        out[phase] = out[phase] + e if phase in out else e
    return out


# -- the phases ------------------------------------------------------------------------
def _receive(words: float) -> Work:
    """The PE core takes `words` 32-bit words off its ramp into SRAM (fp32 moves)."""
    if words <= 0:
        return Work()
    return Work(ops=(Op("move", "fp32", words),), sram_write_bytes=4 * words)


def _adds(length: float, count: float) -> Work:
    """`count` fp32 adds of an incoming partial of `length` words into one in SRAM."""
    if length <= 0 or count <= 0:
        return Work()
    return Work(
        ops=(Op("add", "fp32", length, count=count),),
        sram_read_bytes=4 * length * count,
        sram_write_bytes=4 * length * count,
    )


def _sum_work(plan, traffic: Traffic | None) -> Work:
    """The final sum's arithmetic on its busiest PE (words per vector from the plan)."""
    p, b = real_pairs(plan), plan.batch
    if traffic is None:
        return Work()
    if isinstance(plan, TlrPlan):  # a band's first row adds the max_band - 1 slices below
        return _adds(p * plan.chunk, (plan.max_band - 1) * b)
    if isinstance(plan, PackedPlan):  # column allreduce of the (mt, ch) buffer
        return _adds(p * plan.tiles[0] * plan.chunk, 2 * b) + _receive(
            p * plan.tiles[0] * plan.chunk * b
        )
    return _adds(p * plan.windows * plan.nb, 2 * b) + _receive(p * plan.windows * plan.nb * b)


def _busiest(programs: list[PeProgram], phase: int, b: int, model: PerfModel) -> Work:
    works = [prog.work(phase, b) for prog in programs]
    return max(works, key=lambda w: model.cost(w).cycles)


def mvm_phases(
    wafer: Wafer,
    plan: TlrPlan | PackedPlan | GroupedPlan,
    *,
    fns: TlrFns | None = None,
    copies: int = 1,
    model: PerfModel | None = None,
    fab: Mapping[str, Traffic] | None = None,
    phase1: str = PHASE1_FORM,
) -> Phases:
    """One product of `plan.batch` vectors: overlap(serial(x_in, phase1_vhx, reshuffle,
    phase3_uy, y_sum), host_io); `copies` operators on one system share its host I/O.
    `fab`: the traffic per phase when the caller has traced it (`fabric_by_phase`);
    `phase1`: the phase-1 form (`pe_programs.FORMS`)."""
    model = model or PerfModel(wafer.spec)
    fab = fab if fab is not None else fabric_by_phase(wafer, plan, fns)
    programs = pe_tiles(plan, phase1)
    b, isz = plan.batch, plan.itemsize

    def fabric(name: str, extra: Work = Work()) -> Work:
        t = fab.get(name)
        return extra if t is None else Work.from_traffic(t) + extra

    def words(name: str) -> float:  # words per PE of a multicast or broadcast phase
        return max(fab[name].links.values(), default=0.0) if name in fab else 0.0

    on_wafer = serial(
        Phase("x_in", fabric("x_in", _receive(words("x_in")))),
        Phase("phase1_vhx", _busiest(programs, 1, b, model)),
        Phase("reshuffle", fabric("reshuffle", _receive(words("reshuffle")))),
        Phase("phase3_uy", _busiest(programs, 3, b, model)),
        Phase("y_sum", fabric("y_sum", _sum_work(plan, fab.get("y_sum")))),
        name="on_wafer",
    )
    (m, n) = plan.shape
    io = Phase("host_io", Work(host_io_bytes=(m + n) * b * isz), repeat=copies)
    return overlap(on_wafer, io, name="tlrmvm")


def product_s(plan: TlrPlan | PackedPlan | GroupedPlan, spec: WaferSpec) -> float:
    """Predicted seconds of one product of `plan` alone on one wafer of `spec` (a one-device
    wafer of the plan's grid; `predict(...).predicted_s` at systems 1, copies 1): the price
    by which `grouped_plan.plan_grouped` chooses its group size."""
    wafer = build_wafer(spec, grid=plan.grid, mesh_shape=(1, 1))
    return PerfModel(spec).evaluate(mvm_phases(wafer, plan)).seconds


class Deployment(NamedTuple):
    """The wafers one product is priced on: `systems` systems, each running one copy of the
    operator (`fill=False`) or as many copies as fit it (`fill=True`)."""

    systems: int = 1
    fill: bool = False


MAX_SYSTEMS = 10**6  # far past any cluster (SC23 priced 48 CS-2s); bounds the arithmetic


def _check_deployment(on: Deployment, measured_wall_s: float | None) -> None:
    """TlrError for what no report can price (hunt 65: systems -2 gave -1.5e10 B/s, 0 gave 0
    and a measured -1 s was printed as measured)."""
    systems, fill = on
    if not (is_int(systems) and 1 <= systems <= MAX_SYSTEMS):
        got = shown_setting(systems)
        raise TlrError(f"systems must be an integer in 1..{MAX_SYSTEMS:,}, got {got}")
    if not isinstance(fill, bool | np.bool_):
        raise TlrError(f"fill must be True or False, got {shown_setting(fill)}")
    if measured_wall_s is None:
        return
    if not (is_finite(measured_wall_s) and measured_wall_s >= 0):
        raise TlrError(
            f"measured_wall_s must be a finite number of seconds >= 0 (or None), got "
            f"{shown_setting(measured_wall_s)}"
        )


def predict(
    wafer: Wafer,
    plan: TlrPlan | PackedPlan | GroupedPlan,
    op: TlrOperator,
    *,
    fns: TlrFns | None = None,
    on: Deployment = Deployment(),
    measured_wall_s: float | None = None,
    extra: Mapping[str, object] | None = None,
    phase1: str = PHASE1_FORM,
) -> RunReport:
    """The RunReport of one product on `on.systems` wafers of `wafer.spec`, each running one
    operator or filled with copies of it (`Deployment`); one product is `plan.batch` vectors
    (`vectors_per_product`: `predicted_s` is the product's, not one vector's). `extra` holds
    `cerebras` (the SDK accounting, `cerebras_bandwidth`: its bytes and its time both count
    every vector of the product), `model_bytes_per_s` (`bases_bytes_moved`: the compressed
    bases of every copy read once per vector, as the priced PE programs read them, over the
    predicted on-wafer time: x and y already on the wafer, as the SDK accounting takes
    them), `model_bytes_per_s_with_io` (over the
    whole predicted time, host I/O of every copy included) and `phase1_alternative`: the
    same figures with phase 1 in the other form (`phase1`: the one priced, the published
    column AXPY by default; the alternative the row dots, or the reverse)."""
    _check_deployment(on, measured_wall_s)
    systems, fill = on
    spec = wafer.spec
    model = PerfModel(spec)
    copies = copies_per_system(plan, spec) if fill else 1
    fab = fabric_by_phase(wafer, plan, fns)
    phases = mvm_phases(wafer, plan, fns=fns, copies=copies, model=model, fab=fab, phase1=phase1)
    traffic = functools.reduce(lambda a, t: a + t, fab.values(), Traffic())
    # the bases as the priced PE programs stream them: once per vector of the product
    # (`Tile.work(vectors)`: a PE has no cache to keep a tile between vectors), every copy,
    # every system (hunt 70: once per product, so --batch 4 read as 4x less bandwidth)
    moved = plan.batch * systems * copies * op.bases_bytes
    other = PHASE1_ALTERNATIVE if phase1 == PHASE1_FORM else PHASE1_FORM
    alt = model.evaluate(mvm_phases(wafer, plan, copies=copies, model=model, fab=fab, phase1=other))
    alt_on_wafer_s = alt.leaf("on_wafer").seconds

    def figures(t: Timing) -> dict[str, object]:
        on_wafer_s = t.leaf("on_wafer").seconds
        return {
            "plan": plan.describe(),
            "copies_per_system": copies,
            "vectors_per_product": plan.batch,  # what predicted_s covers
            "bases_bytes": op.bases_bytes,
            "bases_bytes_moved": moved,  # per product, as model_bytes_per_s counts them
            "on_wafer_s": on_wafer_s,
            "model_bytes_per_s": moved / on_wafer_s,
            "model_bytes_per_s_with_io": moved / t.seconds,
            "cerebras": cerebras_bandwidth(
                plan, model, systems=systems, copies=copies, phase1=phase1
            ),
            "phase1_alternative": {
                "form": other,
                "on_wafer_s": alt_on_wafer_s,
                "model_bytes_per_s": moved / alt_on_wafer_s,
                "model_bytes_per_s_with_io": moved / alt.seconds,
                "cerebras": cerebras_bandwidth(
                    plan, model, systems=systems, copies=copies, phase1=other
                ),
            },
            **dict(extra or {}),
        }

    return RunReport.build(
        "tlrmvm",
        spec,
        phases,
        measured_wall_s=measured_wall_s,
        traffic=traffic,
        sram=wafer.sram.summary(),
        reads=wafer.sram.sized_reads(),  # the reserve decided the fit (hunt 82)
        assumptions=ASSUMPTIONS,
        units="mvm",
        systems=systems,
        model=model,
        extra=figures,
    )


# -- per PE ------------------------------------------------------------------------------
def _regions(plan: TlrPlan | PackedPlan | GroupedPlan) -> list[Region]:
    rows, cols = plan.grid
    if not isinstance(plan, GroupedPlan):
        return [Region(f"tlrmvm {plan.layout} bases", 0, 0, rows, cols)]
    return [
        Region(f"tile cols {','.join(str(j) for j in g if j >= 0)}", r, 0, 1, cols)
        for r, g in enumerate(plan.col_group)
    ]


def pe_trace(wafer: Wafer, plan: TlrPlan | PackedPlan | GroupedPlan, report: RunReport) -> PeTrace:
    """The per-PE trace of `report` (this plan's product on `wafer`, its ledger and dead
    PEs): see the module docstring."""
    weights = pe_weights(plan, PerfModel(wafer.spec, report.calibration))
    return trace_from(wafer, report, per_pe_work=weights, regions=_regions(plan))
