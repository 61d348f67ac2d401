"""WaferLLM's MeshGEMV as published, counted per PE: one GEMV's instructions on a region.

Contract. `meshgemv_phases(region, (n_in, n_out), reduce_axis=...)` is one matrix-vector
product y (n_out) = W^T x (n_in) (`dims`: (n_in, n_out), as `transformer.layer_products`
gives a product's) as WaferLLM's decode runs it (He et al., OSDI 2025,
arXiv:2502.04563; the code `SOURCE`), on the busiest PE (the allreduce's root), phase by
phase. The input is split along `reduce_axis` ("cols": over the region's columns, the same
piece on every row; "rows": over its rows) and the output along the other axis; nothing
moves before or after: the result is left replicated along `reduce_axis`, which is the next
product's input layout when that product reduces along the other axis (WaferLLM's decode
alternates the axis, `reconfig_allreduce_axis`). On `a` PEs along the reduce axis and `b`
across it, each PE holds Kt = ceil(n_in / a) inputs and Nt = ceil(n_out / b) outputs:

- zero: `@fmovh(out, 0.0)`, one 16-bit move DSD of Nt from a scalar (decode.csl, every
  `*_matvec_mult`): 1 instruction, Nt elements, Nt x 2 bytes written.
- gemv: `@map(gemv_static_step, left_vector_dsd)`, each step one `@fmach(out, out, W, x_i)`
  over Nt elements (meshgemv.csl `mv_compute`, decode.csl `vecmat_computation`): Kt FMAC
  DSDs of Nt (only the nonzero inputs fire, as `wse_systems.decoder` assumes), each reading W
  and out and writing out (2 reads, 1 write per element). No task: the products are called
  in sequence from one function (`decode_struct`).
- reduce_group: the allreduce's first phase (`two_tree_allreduce_y` / `all_reduce_bsz_dim`):
  the `a` PEs in `groups` groups of m = a / groups; in each group both halves stream their
  partial sums toward the group's root (index m // 2) at once, each PE one `@faddh(send,
  recv, own)` (fabric in, fabric out: pipelined). The root runs one `@faddh(own, recv, own)`
  of Nt per side it has (2, or 1 at a group's end): those DSDs, their 2 x Nt values off its
  ramp (ceil(Nt x bytes / 4) wavelets each), h1 = max(m // 2, m - 1 - m // 2) hops and h1
  relay stages (each PE on the longer side passes the stream through its core once).
- reduce_groups: the second phase, the same chain over the `groups` roots (m PEs apart)
  toward root index groups // 2: its root's 1 or 2 `@faddh`, h2 = max(groups // 2,
  groups - 1 - groups // 2) relay stages and h2 x m hops.
- broadcast: the root's `@mov16(bdcast_send, own)` of Nt values (decode.csl; the routers
  multicast both ways: ceil(Nt x bytes / 4) wavelets on its ramp), to the farther end of the
  line (max(root, a - 1 - root) hops), one relay. (meshgemv.csl sends up then down, two `@fmovh`:
  the decode's one multicast is what decode runs.) Each chain's far end sends first, one move
  DSD of Nt to the fabric on the critical path (`two_tree_allreduce`).
- control: the call's control instructions on the critical path between those DSDs (the call,
  the DSR loads, the role tests of the allreduce: `wse_core.cost.meshgemv_rows.KERNEL_CONTROL`,
  counted by hand, 25), at `control_instruction_cycles` (on a CS-3 fitted with the DSD issue
  on WaferLLM's measured MeshGEMV rows, issue 41; a kernel's own scalar arithmetic, e.g. MD's,
  is `scalar_instruction_cycles`, assumed 1 on every system). The measured rows' own repeat
  loop and timer reads (`HARNESS_CONTROL`) are the measurement's, not a decode's: not charged here.

Between products that reduce along different axes the decode rewrites its allreduce's routes
(`route_resets`): `decode_struct` calls `reconfig_allreduce_axis` `RECONFIGS_PER_LAYER` = 6
times a layer (Decode/WSE-3/src/decode.csl, lines 774-811 at `SOURCE`'s commit), each a
`color_config.reset_routes` on each of the allreduce's `COLOURS_PER_RECONFIG` = 5 colours (two
first-phase, two second-phase, the broadcast: Decode/WSE-3/src/comm_lib/comm_pe.csl, lines
989-1007). A reset is the PE's own write of one colour's routes into its router's
configuration, from its program, with nothing sent: not the stencil's router switch
(`router_switch_cycles`, fitted on Table II: a switch position advanced by a control wavelet
along a chain of senders, its fit holding the stencil step's unnamed per-block idle cycles).
No figure is published for it, so its cost is an assumption (`ROUTE_RESET`,
`--assume meshgemv.route_reset_cycles=N`), listed with every prediction it moves; the
decode's layer pays it once per reconfiguration on its critical path (`wse_systems.decoder`),
as `Work.fixed_cycles` (no `Work` counter prices a route reset). WaferLLM's WSE-2 decode
(Decode/WSE-2/src/decode.csl at the same commit) reconfigures nothing, and the SDK gemv
dataflow (`gemv="sdk"`) runs every product's collectives on the same axes, so it pays none.

`groups`: WaferLLM's `group_num` is a compile-time parameter (its decode configs use 15-32
for 240-720 PEs per side, e.g. 18 for 360, `Decode/WSE-3/model_config`); here, unless given,
the divisor of `a` whose allreduce prices fastest at the spec's constants (`best_groups`),
as `wse_core.cost.collectives.reduce_line` takes the fastest line reduce.

Words of partial sums travel two 16-bit values per 32-bit wavelet (the fabric DSDs' `simd_64`
mode on WSE-3, `simd_32` on WSE-2, pack 16-bit values; the model's convention throughout).
"""

from __future__ import annotations

import math

from wse_core.cost.assumptions import register_system_constant, system_constant
from wse_core.cost.collectives import two_tree_allreduce
from wse_core.cost.mechanisms import Constant
from wse_core.cost.meshgemv_rows import KERNEL_CONTROL, control_count
from wse_core.cost.perf import Op, PerfModel, Phase, Phases, Work, serial
from wse_core.divisors import divisors
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region

from wse_systems.attention import value_dtype

__all__ = [
    "SOURCE",
    "REDUCE_AXES",
    "DECODE_AXES",
    "RECONFIGS_PER_LAYER",
    "COLOURS_PER_RECONFIG",
    "ROUTE_RESET",
    "ROUTE_RESET_CYCLES",
    "ROUTE_RESET_KEY",
    "best_groups",
    "meshgemv_parts",
    "meshgemv_phases",
    "route_reset_cycles",
    "route_resets",
]

# The code read for the counts above (He et al., OSDI 2025; references/calibration-rows.md lists
# it as calibration material: instruction counts per PE, no cycle counts published).
SOURCE = {
    "repository": "MeshInfra/WaferLLM",
    "commit": "2cd13b5c16ab0c280a2cc1f80f105d704c333915",
    "files": (
        "MeshGEMV/WSE-3/src/meshgemv.csl",
        "MeshGEMV/WSE-3/src/comm_lib/comm_pe.csl",
        "MeshGEMV/WSE-3/src/layout.csl",
        "MeshGEMV/WSE-3/run_sim.sh",
        "Decode/WSE-3/src/decode.csl",
        "Decode/WSE-3/src/comm_lib/comm_pe.csl",
    ),
}
REDUCE_AXES = ("cols", "rows")
# The axis each of a decoder layer's products (and the head's) reduces along in WaferLLM's
# decode: alternating, so that a product's output (replicated along its reduce axis) is the
# next one's input (`reconfig_allreduce_axis`).
DECODE_AXES = {
    "qkv": "cols",
    "o_proj": "rows",
    "up_gate": "cols",
    "down": "rows",
    "lm_head": "cols",
}


# The decode's route resets (module contract): reconfigurations a layer and colours each.
RECONFIGS_PER_LAYER = 6  # decode.csl `decode_struct`, lines 774-811 (2cd13b5)
COLOURS_PER_RECONFIG = 5  # comm_pe.csl `reconfig_allreduce_axis`, lines 989-1007 (2cd13b5)
ROUTE_RESET_CYCLES = 10.0  # cycles a colour's route reset costs where no --assume changes it
ROUTE_RESET = Constant(
    units="cycles/colour",
    mechanism="a PE's rewrite of one colour's routes in its own router between collectives "
    "along different axes (`tile_config.color_config.reset_routes`), on the program's path",
    basis="assumed",
    source="no figure published (WaferLLM publishes no cycle counts; the SDK documents no "
    "cost for a route reset). 10: a handful of scalar steps (the call, the comptime route "
    "word loaded and stored to the router's configuration); 2: one store and its issue; 302: "
    "the stencil's fitted router switch (router_switch_cycles, another mechanism whose fit "
    "holds the stencil's unnamed per-block idle cycles), a ceiling for a reset that waits on "
    "the fabric to drain",
    sweep=(2.0, 10.0, 100.0, 302.0),
    limits=(0.0, 100_000.0),
)
ROUTE_RESET_KEY = "meshgemv.route_reset_cycles"  # `--assume meshgemv.route_reset_cycles=N`
register_system_constant(ROUTE_RESET_KEY, ROUTE_RESET, value=ROUTE_RESET_CYCLES)


def route_reset_cycles() -> float:
    """Cycles a colour's route reset costs: `ROUTE_RESET_CYCLES`, or `--assume
    meshgemv.route_reset_cycles=N` (noted as read: `wse_core.cost.reads`)."""
    return system_constant(ROUTE_RESET_KEY)


def route_resets(reconfigs: float = RECONFIGS_PER_LAYER) -> Work:
    """`reconfigs` reconfigurations of the allreduce's routes (a layer's by default), each
    `COLOURS_PER_RECONFIG` colours reset at `route_reset_cycles()` each, on the PE's path."""
    return Work(fixed_cycles=reconfigs * COLOURS_PER_RECONFIG * route_reset_cycles())


def _allreduce(a: int, groups: int, nt: int, bytes_per_value: int) -> tuple[tuple[str, Work], ...]:
    """The allreduce of the module contract (`wse_core.cost.collectives.two_tree_allreduce`:
    the calibration prices WaferLLM's measured MeshGEMV rows with the same counts)."""
    return two_tree_allreduce(a, groups, nt, bytes_per_value, value_dtype(bytes_per_value))


_BEST: dict[tuple, int] = {}  # by (a, nt, bytes, the model's constants)


def best_groups(a: int, nt: int, bytes_per_value: int, spec: WaferSpec) -> int:
    """The divisor of `a` (WaferLLM's `group_num`) whose allreduce of `nt` values prices
    fastest at `spec`'s constants (fitted ones in place; a tie takes fewer groups)."""
    model = PerfModel(spec)
    key = (a, nt, bytes_per_value, repr(model.rates))
    if key not in _BEST:
        cost = {
            g: sum(model.cost(w).cycles for _, w in _allreduce(a, g, nt, bytes_per_value))
            for g in divisors(a)
        }
        _BEST[key] = min(cost, key=lambda g: (cost[g], g))
    return _BEST[key]


def meshgemv_parts(
    region: Region,
    dims: tuple[int, int],
    *,
    reduce_axis: str,
    bytes_per_value: int = 2,
    input_density: float = 1.0,
    groups: int | None = None,
    spec: WaferSpec,
) -> tuple[tuple[str, Work], ...]:
    """The named phases of one MeshGEMV of `dims` (n_in, n_out; the module contract), on the
    busiest PE."""
    n_in, n_out = dims
    if reduce_axis not in REDUCE_AXES:
        raise ValueError(f"reduce_axis must be one of {REDUCE_AXES}, got {reduce_axis!r}")
    if not 0.0 <= input_density <= 1.0:
        raise ValueError(f"input_density must be in [0, 1], got {input_density}")
    a, b = (region.cols, region.rows) if reduce_axis == "cols" else (region.rows, region.cols)
    kt, nt = math.ceil(n_in / a), math.ceil(n_out / b)
    g = best_groups(a, nt, bytes_per_value, spec) if groups is None else groups
    if a % g:
        raise ValueError(f"groups ({g}) must divide the {a} PEs along the reduce axis")
    dt, size = value_dtype(bytes_per_value), bytes_per_value
    fired = kt * input_density
    zero = Work(ops=(Op("move", dt, nt, mem_reads=0.0),), sram_write_bytes=nt * size)
    gemv = Work(
        ops=(Op("fmac", dt, nt, count=fired),),
        sram_read_bytes=2 * fired * nt * size,
        sram_write_bytes=fired * nt * size,
    )
    control = Work(control_instructions=control_count(KERNEL_CONTROL))
    return (("zero", zero), ("gemv", gemv), *_allreduce(a, g, nt, bytes_per_value),
            ("control", control))  # fmt: skip


def meshgemv_phases(
    region: Region,
    dims: tuple[int, int],
    *,
    reduce_axis: str,
    bytes_per_value: int = 2,
    input_density: float = 1.0,
    groups: int | None = None,
    spec: WaferSpec,
    name: str = "meshgemv",
) -> Phases:
    """`meshgemv_parts` as serial phases (the root's steps in order)."""
    parts = meshgemv_parts(
        region, dims, reduce_axis=reduce_axis, bytes_per_value=bytes_per_value,
        input_density=input_density, groups=groups, spec=spec,
    )  # fmt: skip
    return serial(*(Phase(n, w) for n, w in parts), name=name)
