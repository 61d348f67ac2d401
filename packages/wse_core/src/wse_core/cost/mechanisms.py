"""The cost model's constants: each one a mechanism of the machine, with units and a basis.

Contract. `CONSTANTS` maps a `WaferSpec` field (or, for `CALIBRATION_KEYS`, a setting of the
calibration) to a `Constant`: its units, the mechanism it prices, its basis and where that
basis comes from, a plausible range (`sweep`) for `wse experiments run NAME --sweep`, and the
values `--assume` takes (`limits`, inclusive: past them no wafer means anything; hunt 57:
fp32_mul_width=1e30 was priced).
A kernel pays a constant only by counting its mechanism in `wse_core.cost.perf.Work` / `Op`:

    mechanism (Cost.mechanisms key)  constant                       counted as
    simd                             SIMD table (spec.simd_widths), Op elements / rate: the
                                     SRAM ports, link bytes         slowest of the instruction's
                                                                    own bounds (Op.bounds)
    dsd_issue                        dsd_issue_cycles               Op.count (DSDs issued)
    task_activation                  task_activation_cycles         Work.task_activations
    scalar                           scalar_instruction_cycles      Work.scalar_instructions
    control                          control_instruction_cycles     Work.control_instructions
    sram                             sram_*_bytes_per_cycle         Work.sram_*_bytes
    link                             link_bytes_per_cycle           Work.links (busiest, incl. ramp)
    hop                              hop_latency_cycles             Work.latency_hops
    relay                            2 * ramp_latency_cycles + 1    Work.relay_stages
    router_switch                    router_switch_cycles           Work.router_switches
    fixed                            (none: only where no mechanism is known)  Work.fixed_cycles
    host_io                          host_io_bytes_per_s, system_latency_s  Work.host_io_bytes,
                                                                    Work.system_hops

`hop_latency_cycles` and `ramp_latency_cycles` are `sourced` on WSE-2 and WSE-1, and with
`dsd_issue_cycles` (fitted on WSE-2's Table II) and `control_instruction_cycles` (assumed)
fitted on a CS-3's wafer only (`SYSTEM_FITTED`: WaferLLM's MeshGEMV measured on a CS-3;
`Calibration.for_spec` puts them in a spec whose `system` is CS-3).

Bases: `published` (a vendor or SDK figure), `sourced` (a paper's text, cited), `inferred`
(read from public material by us; the reasoning is in `source`), `assumed` (no public figure:
swept), `fitted` (by `wse_core.cost.calibration` on the rows named in `source`; the preset value
is the prior used when those rows are left out).

References (the calibration's sources: docs/references/calibration-rows.md):
- SDK: Cerebras SDK documentation, "Computing with Cerebras" and the CSL language appendix
  (SIMD widths); csl-examples benchmark scripts (850 MHz, 1 cycle per hop clock correction).
- Luczynski et al., "Near-Optimal Wafer-Scale Reduce", HPDC 2024, arXiv:2404.15888: model
  T = max(C, E/N + L) + (2 T_R + 1) D validated on a CS-2 within 4%; one cycle per link
  traversal; T_R ~ 2 cycles core<->router on WSE-2; multicast at no extra cost. Read from
  secondary summaries of the paper (the stored corpus had no copy of its text or figures).
- Jacquelin et al., arXiv:2204.03775, Table II and Sec. V (25-point stencil, the calibration
  set): step times at nz = 1000 and 69.6% busy cycles at 600 x 600.
- Rocki et al., SC20, arXiv:2010.03660: a wafer-wide allreduce "in a cycle count only about
  10% greater than the diameter of the system".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

__all__ = [
    "Constant",
    "CONSTANTS",
    "CALIBRATION_KEYS",
    "CALIBRATION_DEFAULTS",
    "SYSTEM_FITTED",
    "MECHANISMS",
    "CORE_MECHANISMS",
    "LATENCY_MECHANISMS",
    "MECHANISM_CONSTANTS",
    "mechanism_keys",
    "assumed_beside",
    "describe",
]

Basis = Literal["published", "sourced", "inferred", "assumed", "fitted"]

# Cost.mechanisms keys, grouped as the overlap rule uses them (wse_core.cost.perf.OVERLAP).
CORE_MECHANISMS = ("simd", "dsd_issue", "task_activation", "scalar", "control")
LATENCY_MECHANISMS = ("hop", "relay", "router_switch", "fixed")
MECHANISMS = (*CORE_MECHANISMS, "sram", "link", *LATENCY_MECHANISMS, "host_io")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Constant:
    """One constant of the cost model: what it prices, in what units, on what basis."""

    units: str
    mechanism: str
    basis: Basis
    source: str
    sweep: tuple[float, ...] = ()
    limits: tuple[float, float] = (0.0, math.inf)  # [low, high] an assumption may take

    def line(self) -> str:
        return f"[{self.units}] {self.mechanism}; {self.basis}: {self.source}"

    def outside(self, value: float) -> str | None:
        """ "must be in [low, high] units" when `value` is outside `limits`, else None (the one
        wording of `--assume`'s, `--set`'s and a spec file's refusals)."""
        low, high = self.limits
        return None if low <= value <= high else f"must be in [{low:g}, {high:g}] {self.units}"


_C = Constant
CONSTANTS: Mapping[str, Constant] = MappingProxyType(
    {
        "clock_hz": _C(
            units="Hz",
            mechanism="PE clock: cycles per second",
            basis="assumed",
            limits=(1e6, 1e11),
            source="not published; SDK scripts divide WSE-2 cycles by 850 MHz; WSE-3 1.1 GHz "
            "from marketing totals",
            sweep=(0.85e9, 1.0e9, 1.1e9),
        ),
        "hop_latency_cycles": _C(
            units="cycles/hop",
            mechanism="router hop: one link traversal of a wavelet",
            basis="sourced",
            # hunt 81: 0 was taken; a router forwards a wavelet a cycle, so a hop takes one
            limits=(1.0, 1000.0),
            source="Luczynski et al. (1 cycle per link traversal); SDK scripts correct clocks "
            "by 1 cycle per hop (a simulator trace shows 2); on a CS-3 fitted instead "
            "(wse_core.cost.calibration: WaferLLM's MeshGEMV measured on a CS-3, about 2)",
            sweep=(1.0, 1.5, 2.0),
        ),
        "ramp_latency_cycles": _C(
            units="cycles",
            mechanism="core<->router ramp, one way (T_R); a dependent relay stage costs "
            "2 T_R + 1 (up the ramp, down the ramp, one cycle in the core)",
            basis="sourced",
            limits=(0.0, 1000.0),
            source="Luczynski et al.: T_R ~ 2 cycles on WSE-2 (earlier literature said 7); on a "
            "CS-3 fitted instead (wse_core.cost.calibration: WaferLLM's MeshGEMV measured on "
            "a CS-3, about 4.3)",
            sweep=(1.0, 2.0, 3.0, 7.0),
        ),
        "link_bytes_per_cycle": _C(
            units="B/cycle per link direction",
            mechanism="wavelet injection: one 32-bit wavelet per link (and per ramp) per "
            "direction per cycle",
            basis="published",
            limits=(0.125, 1024.0),
            source="SDK, 'Computing with Cerebras'",
        ),
        "dsd_issue_cycles": _C(
            units="cycles/DSD",
            mechanism="busy cycles of one DSD instruction beyond its elements (issue, DSD "
            "set-up and the loop control around it)",
            basis="fitted",
            limits=(0.0, 10_000.0),
            source="Jacquelin et al. Table II busy share (69.6% at 600 x 600): busy cycles less "
            "elements and task activations, over the DSDs a step issues; prior 3 (an SDK "
            "simulator trace shows 2-3 cycles from issue to the first element: "
            "lingzhi227/MIMD_dataflow, docs/references/calibration-rows.md); on a CS-3 fitted "
            "instead (wse_core.cost.meshgemv_rows: WaferLLM's MeshGEMV measured on a CS-3, "
            "each Mt = 8 row less its Mt = 1 partner, 7 more @fmach DSDs in @map: about 2.1)",
            sweep=(3.0, 10.0, 20.0, 30.0),
        ),
        "task_activation_cycles": _C(
            units="cycles/activation",
            mechanism="activating a task (a wavelet-triggered or local task starts)",
            basis="fitted",
            limits=(0.0, 10_000.0),
            source="SDK-simulator SUMMA GEMM, WSE-2, P = 4, 14 x 14 x 14 (main task 45,783 "
            "cycles, 784 FMACS of 14, 800 task switches; Wang-oss-tech/csl-experiments notes, "
            "docs/references/calibration-rows.md); prior 10",
            sweep=(0.0, 5.0, 10.0, 20.0, 50.0),
        ),
        "router_switch_cycles": _C(
            units="cycles/switch",
            mechanism="a dependent router switch reconfiguration of a localized broadcast (the "
            "next of R senders takes the chain), idle on the receiving PE",
            basis="fitted",
            limits=(0.0, 100_000.0),
            source="Jacquelin et al. Table II step time (mean of the 8 rows) less the step's "
            "other mechanisms, over the R switches per Z block; prior 0. Table II fixes "
            "one Z block only, so per block and per step are not told apart by it",
            sweep=(0.0, 100.0, 300.0, 500.0),
        ),
        "scalar_instruction_cycles": _C(
            units="cycles/instruction",
            mechanism="one scalar (non-DSD) instruction of a kernel's own work: a per-atom or "
            "per-pair scalar step (its loads, stores, compares, branches); a call's control "
            "between DSDs is control_instruction_cycles",
            basis="assumed",
            limits=(0.0, 1000.0),
            source="no public figure; one instruction issued per cycle, on every system (the "
            "CS-3 MeshGEMV rows measure control instructions only: control_instruction_cycles)",
            sweep=(1.0, 2.0, 4.0),
        ),
        "control_instruction_cycles": _C(
            units="cycles/instruction",
            mechanism="control flow between DSDs: a call, return, branch, compare of a role, "
            "DSR load or DSD base-address set",
            basis="assumed",
            limits=(0.0, 1000.0),
            source="no public figure; one instruction issued per cycle. On a CS-3 fitted "
            "instead (wse_core.cost.meshgemv_rows: WaferLLM's MeshGEMV measured on a CS-3, "
            "the call's 39 control instructions counted by hand from its CSL, about 3.1)",
            sweep=(1.0, 2.0, 3.0, 4.0),
        ),
        "sram_read_bytes_per_cycle": _C(
            units="B/cycle per PE",
            mechanism="SRAM read port: bounds each instruction's vector operands (Op.bounds) "
            "and a phase's reads",
            basis="sourced",
            limits=(0.125, 1024.0),
            source="Jacquelin et al.: 16 B read per cycle on WSE-2 (the SDK's per-port figure "
            "is two 32-bit reads); WSE-3's is not published: the SDK's 8-wide fp16 and "
            "4-wide fp32 would need 32 B, the 21 PB/s marketing total about 16 B; swept",
            sweep=(8.0, 16.0, 32.0),
        ),
        "sram_write_bytes_per_cycle": _C(
            units="B/cycle per PE",
            mechanism="SRAM write port: bounds each instruction's results (Op.bounds) and a "
            "phase's writes",
            basis="sourced",
            limits=(0.125, 1024.0),
            source="Jacquelin et al.: 8 B write per cycle on WSE-2 (the SDK's per-port figure "
            "is one 32-bit write); WSE-3's is not published (16 B would let 4 fp32 or 8 fp16 "
            "results a cycle, as its SIMD table); swept",
            sweep=(4.0, 8.0, 16.0),
        ),
        "fp32_mul_width": _C(
            units="elements/cycle",
            mechanism="SIMD width of fp32 mul and FMAC (@fmuls, @fmacs), both generations",
            basis="assumed",
            limits=(0.125, 64.0),
            source="the one fp32 width the SDK's table leaves open on both generations. WSE-2: "
            "one element per cycle in an SDK-simulator trace of @fmacs (lingzhi227/MIMD_dataflow,"
            " Systolic_Mul_v2); WSE-3: not traced, held at 1; the table's other fp32 rows are "
            "2x wider on WSE-3 than on WSE-2 (add, sub, move 2 -> 4), so 2 is as plausible; "
            "swept 1..4",
            sweep=(1.0, 2.0, 4.0),
        ),
        "sqrt_cycles": _C(
            units="cycles/element",
            mechanism="square root (no SIMD form)",
            basis="assumed",
            limits=(0.0, 10_000.0),
            source="no public figure",
            sweep=(5.0, 10.0, 50.0),
        ),
        "div_cycles": _C(
            units="cycles/element",
            mechanism="division",
            basis="sourced",
            limits=(0.0, 10_000.0),
            source="SDK example comments: about 50 cycles",
            sweep=(20.0, 50.0, 100.0),
        ),
        "host_io_bytes_per_s": _C(
            units="B/s per system",
            mechanism="off-wafer I/O of one system",
            basis="published",
            limits=(1e6, 1e15),
            source="vendor: 1.2 Tb/s per system",
        ),
        "memoryx_bytes_per_s": _C(
            units="B/s each way",
            mechanism="MemoryX -> SwarmX weight stream, and the gradient write-back",
            basis="assumed",
            limits=(1e6, 1e15),
            source="not published: the system's 1.2 Tb/s I/O (12 x 100 GbE)",
            sweep=(75e9, 150e9, 300e9),
        ),
        "swarmx_bytes_per_s": _C(
            units="B/s per tree level",
            mechanism="SwarmX link into each system (broadcast of weights, reduce of gradients)",
            basis="assumed",
            limits=(1e6, 1e15),
            source="not published: the system's 1.2 Tb/s I/O",
            sweep=(75e9, 150e9, 300e9),
        ),
        "swarmx_fanout": _C(
            units="systems per SwarmX node",
            mechanism="broadcast / reduce tree: levels = ceil(log_fanout num_csx), "
            "system_latency_s each",
            basis="assumed",
            limits=(2.0, 1024.0),
            source="not published; a binary tree",
            sweep=(2.0, 4.0, 16.0),
        ),
        "memoryx_capacity_bytes": _C(
            units="B",
            mechanism="MemoryX capacity for master weights and optimizer state",
            basis="published",
            limits=(1e9, 1e18),
            source="largest published configurations: CS-2 up to 2.4 PB (Cerebras glossary), "
            "CS-3 up to 1.2 PB (CS-3 launch); the 1T-parameter demo used 55 TB",
        ),
        "code_stack_bytes_per_pe": _C(
            units="B/PE",
            mechanism="SRAM a PE's program holds (its code, stack and the runtime's memcpy "
            "buffers), taken off the data budget every SRAM ledger and planner sizes against",
            basis="assumed",
            limits=(0.0, float(1 << 30)),
            source="SDK, 'A Conceptual View': each PE has its own executable code in its "
            "memory; no size published (none found in csl-examples or the SDK docs). 2 KiB, "
            "swept from none to 4 KiB: past about 4.6 KiB Llama 3.1 70B no longer fits the 4 "
            "CS-3 Cerebras serves it on (Hot Chips 2024) in this model's placement",
            sweep=(0.0, 2048.0, 4096.0),
        ),
        "system_latency_s": _C(
            units="s/pass",
            mechanism="latency of one activation pass between two systems",
            basis="assumed",
            limits=(0.0, 1.0),
            source="no public figure; swept to 50 us (hunt decode41): a pass through a host "
            "(a decode token's trip out and its id back, Cerebras' first inference release "
            "waiting on it) runs the host's software too: an argmax over 128,256 fp32 logits "
            "alone takes ~12 us on a CPU core, 128,256 x 2 B of logits 1.7 us at 150 GB/s",
            sweep=(0.5e-6, 2e-6, 10e-6, 50e-6),
        ),
        "overlap": _C(
            units="0 or 1",
            mechanism="whether a PE's datapath, memory ports and router stream at once (1) or "
            "their times add (0)",
            basis="assumed",
            limits=(0.0, 1.0),
            source="model structure (Luczynski et al. overlap contention and streaming)",
            sweep=(0.0, 1.0),
        ),
        "table_ii_block_z": _C(
            units="cells",
            mechanism="Z block of the Table II runs (sets how many DSDs a step issues, which "
            "the dsd_issue_cycles fit divides by)",
            basis="inferred",
            limits=(1.0, 1000.0),
            source="not given with Table II; 334 as Table III's nz = 1000 row (the same code "
            "and column). Table III's blocks are each column in the fewest equal blocks of at "
            "most 400 cells (100 to 400 whole, 500 and 700 in two, 1000 in three); the paper "
            "gives no reason for 400, and SRAM is not it: at nz = 1000 this model's ledger fits "
            "any block up to 547 beside the column (579 with no program reserve)",
            sweep=(100.0, 200.0, 334.0, 500.0, 1000.0),
        ),
        "wave25_add_width": _C(
            units="elements/cycle",
            mechanism="SIMD width of the published 25-point step's fp32 FADD / FSUB (bank "
            "classes of their operands)",
            basis="inferred",
            limits=(0.125, 64.0),
            source="Table II: 43 instructions per cell at 69.6% busy of 64.7 cycles = 45 busy "
            "cycles per cell, one element per cycle each (the SDK's 2-wide fp32 add needs two "
            "bank classes)",
            sweep=(1.0, 2.0),
        ),
    }
)

# Keys of CONSTANTS that are settings of the calibration and the kernels' published
# algorithms, not WaferSpec fields, with their values when no assumption changes them.
CALIBRATION_DEFAULTS: Mapping[str, float] = MappingProxyType(
    {"table_ii_block_z": 334.0, "wave25_add_width": 1.0}
)
CALIBRATION_KEYS = tuple(CALIBRATION_DEFAULTS)
# Spec fields fitted on one system's wafer only (system -> fields; `wse_core.cost.calibration`
# fits them, `wse_core.cost.unapplied` exempts the wafer it prices them on): CS-3's fabric
# latencies, its DSD issue and its control instruction, on WaferLLM's MeshGEMV measured on a
# CS-3 (issue 41: the Mt = 8 rows measure a DSD at ~2 cycles, not WSE-2's 11.5).
SYSTEM_FITTED: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"CS-3": ("hop_latency_cycles", "ramp_latency_cycles", "dsd_issue_cycles",
              "control_instruction_cycles")}
)  # fmt: skip


# The constants each Cost.mechanisms key is priced with (for `mechanism_keys`): an
# instruction's elements by its SIMD width and its own SRAM ports (sqrt and div cycles too,
# where a row has them); a fitted constant by the calibration's fit too
_REFIT = ("dsd_issue_cycles", "task_activation_cycles", "router_switch_cycles", *CALIBRATION_KEYS)
MECHANISM_CONSTANTS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "simd": ("fp32_mul_width", "sram_read_bytes_per_cycle", "sram_write_bytes_per_cycle"),
        "dsd_issue": _REFIT,
        "task_activation": _REFIT,
        "scalar": ("scalar_instruction_cycles",),
        "control": ("control_instruction_cycles",),
        "link": ("link_bytes_per_cycle",),
        "sram": ("sram_read_bytes_per_cycle", "sram_write_bytes_per_cycle"),
        "hop": ("hop_latency_cycles",),
        "relay": ("ramp_latency_cycles",),
        "router_switch": _REFIT,
        "host_io": ("host_io_bytes_per_s", "system_latency_s", "memoryx_bytes_per_s",
                    "swarmx_bytes_per_s", "swarmx_fanout"),
    }
)  # fmt: skip


def mechanism_keys(mechanisms: Mapping[str, float]) -> list[str]:
    """The constants a prediction with these cycles by mechanism may be priced with, in the
    registry's order: each nonzero mechanism's (`MECHANISM_CONSTANTS`), `clock_hz` (every
    time in seconds) and `overlap` (where two streams run); none for no cycles. A guess
    from the mechanisms alone: where the pricing was recorded, `wse_core.cost.listing` lists
    what it read."""
    if not any(mechanisms.values()):  # hunt 69: a GPU row listed the wafer's clock
        return []
    keys = {k for m, v in mechanisms.items() if v for k in MECHANISM_CONSTANTS.get(m, ())}
    streams = (CORE_MECHANISMS, ("sram",), ("link",))
    running = sum(1 for group in streams if any(mechanisms.get(m) for m in group))
    keys |= {"clock_hz"} | ({"overlap"} if running > 1 else set())
    return [k for k in CONSTANTS if k in keys]


def assumed_beside(mechanisms: Mapping[str, float]) -> str:
    """The swept constants that may move a prediction with these cycles by mechanism, each
    with its sweep range ("hop_latency_cycles in 1..2"), whatever its basis (hunt 69: only
    the `assumed` ones were listed, and a sourced hop latency moved a row 15%)."""
    out = []
    for key in mechanism_keys(mechanisms):
        c = CONSTANTS[key]
        if c.sweep:
            out.append(f"{key} in {min(c.sweep):g}..{max(c.sweep):g}")
    return ", ".join(out)


def describe(key: str) -> str:
    """One line: units, mechanism, basis and source of `key`."""
    return CONSTANTS[key].line()
