"""The published 25-point stencil step (Jacquelin et al.) by mechanism: per cell, per block,
per step.

Contract. `wave_step_phases(nz, block_z, radius=4)` is one time step on one PE's Z column of
`nz` cells in Z blocks of `block_z` (the last may be shorter), as Jacquelin et al.
(arXiv:2204.03775) describe the algorithm, with R = radius (4 for the 25-point stencil):

- step_sync (once per step): the step's task starts (one task activation); waiting for the
  farthest neighbour's first word is block 0's halo latency below.
- per block of w cells, serial:
  - halo_in: the 4 R nearest PEs' w values arrive through the router (R w words leave on
    each link direction, 4 R w come down the ramp: the contention C), after R hops and one
    relay stage.
  - update: each direction's receive completing activates a task (4), then the update's
    own (1); the published per-cell mix as one DSD instruction per kind and block: 4 R + 1
    FMUL, 4 R + 1 FADD, 2 R FMA, 1 FSUB in fp32 (17, 17, 8, 1: 43 instructions, 51 flop
    per cell); SRAM: 2 R + 1 Z reads, u_prev and (v dt)^2, the 4 R buffered halos read,
    1 + 4 R written.
  The halo is not hidden behind the update: Table II's profile (69.6% busy cycles) leaves
  30% of the step idle, which an overlapped receive would not.

The FADDs and the FSUB run at `wave25_add_width` elements per cycle (a calibration setting,
`wse_core.cost.mechanisms`): 1 by default, inferred from Table II (43 instructions per cell at
69.6% busy are 45 busy cycles per cell: one element per cycle for every instruction; the
SDK's 2-wide fp32 add needs operands in two bank classes). `step_terms(timing)` splits a
priced step into its per-cell, per-block and per-step cycles.
"""

from __future__ import annotations

from wse_core.cost.pricing import Phase, Phases, Timing, serial
from wse_core.cost.work import Op, Work

__all__ = ["wave_step_phases", "block_widths", "step_terms", "PER_CELL", "PER_BLOCK"]

# Cost.mechanisms keys by how they scale (task activations are split by phase name).
PER_CELL = ("simd", "sram", "link")
PER_BLOCK = ("dsd_issue", "hop", "relay", "router_switch")


def block_widths(nz: int, block_z: int) -> list[int]:
    """Z block lengths of one column: full blocks, then the remainder."""
    if nz < 1 or block_z < 1:
        raise ValueError(f"nz and block_z must be >= 1, got {nz}, {block_z}")
    return [block_z] * (nz // block_z) + ([nz % block_z] if nz % block_z else [])


def _add_width() -> float:
    from wse_core.cost.assumptions import setting

    return setting("wave25_add_width")


def _block(w: int, r: int) -> tuple[Phase, Phase]:
    halo = Work(
        links={"ramp": 4.0 * r * w, **{d: float(r * w) for d in ("N", "S", "E", "W")}},
        latency_hops=float(r),
        relay_stages=1.0,
        router_switches=float(r),  # the R upstream senders take the chain in turn
    )
    one_wide = _add_width() <= 1.0
    mix = (("mul", 4 * r + 1, False), ("add", 4 * r + 1, one_wide), ("fmac", 2 * r, False))
    ops = tuple(Op(k, "fp32", w, count=n, same_bank=b) for k, n, b in mix)
    ops += (Op("sub", "fp32", w, count=1, same_bank=one_wide),)
    reads = (2 * r + 1) + 2 + 4 * r
    update = Work(
        ops=ops,
        sram_read_bytes=4.0 * reads * w,
        sram_write_bytes=4.0 * (1 + 4 * r) * w,
        task_activations=5.0,  # the four receives completing, then the update itself
    )
    return Phase("halo_in", halo), Phase("update", update)


def wave_step_phases(nz: int, block_z: int, *, radius: int = 4, steps: float = 1) -> Phases:
    """`steps` steps of the published algorithm on one PE's Z column (module docstring)."""
    widths = block_widths(nz, block_z)
    blocks: list[Phase | Phases] = []
    for w in sorted(set(widths), reverse=True):
        halo, update = _block(w, radius)
        blocks.append(serial(halo, update, name=f"block_{w}", repeat=widths.count(w)))
    sync = Phase("step_sync", Work(task_activations=1.0))
    return serial(sync, *blocks, name="wave25_step", repeat=steps)


def step_terms(timing: Timing, block_count: int) -> dict[str, float]:
    """Cycles of a priced step (all its repeats) per cell, per block and per step: the
    per-cell mechanisms (elements, SRAM, the halo's words), the per-block ones (DSD issue,
    hops and relay of each block's halo, its five task activations) and the per-step one
    (the step's task activation)."""
    mech = timing.by_mechanism()
    tasks = mech.get("task_activation", 0.0)
    sync = timing.leaf("step_sync").by_mechanism().get("task_activation", 0.0) * timing.repeat
    per_block = sum(mech.get(k, 0.0) for k in PER_BLOCK) + tasks - sync
    out = {
        "per_cell": sum(mech.get(k, 0.0) for k in PER_CELL),
        "per_block": per_block,
        "per_step": sync + mech.get("fixed", 0.0),
    }
    out["blocks"] = float(block_count)
    out["cycles"] = out["per_cell"] + out["per_block"] + out["per_step"]
    return out
