"""The nonlinear shallow-water equations on the field layer (2D, periodic, flat bottom).

    dh/dt + div(h u) = 0,
    du/dt + (u . grad) u + g grad h = 0,

on an Arakawa C grid (the MAC placement: h at cell centres, u on x faces, v on y faces),
second-order centred differences: the mass flux h u with h averaged to the face, the
momentum advection u du/dx + v du/dy with v averaged from its four neighbours onto the u
face (and the mirror for v), time by SSP-RK3 (Shu & Osher), so the scheme is second order in
space and third in time. (Heun's RK2 is unstable with centred differences: it amplifies an
oscillation of frequency w by 1 + (w dt)^4 / 8 a step, which grid-scale waves reach at
CFL 0.4; RK3 is stable on the imaginary axis up to |w dt| = sqrt(3), CFL 0.61 here.)
The mass sum(h) changes only by a telescoping sum of face fluxes (every stage adds
increments to h, never rescales it): it is conserved to round-off. The energy
sum(h |u|^2 / 2 + g h^2 / 2) is conserved by the PDE; the scheme changes it twice over: RK3
multiplies an oscillation's energy by 1 - (w dt)^4 / 12 a step (it damps short waves, O(dt^3)
over a fixed time), and the centred space discretisation, whose advective-form momentum term
does not conserve the discrete energy, changes it at a rate that stays as dt -> 0 on a fixed
grid (hunt 72, float64 of the fp32 fields, the hump on 16 x 16 to t 0.3: -2.47e-2, -8.25e-3,
-6.12e-3, -5.86e-3 at CFL 0.4, 0.2, 0.1, 0.05; 32 x 32 at CFL 0.1: -1.19e-3). The run
reports it as the wave energy about the initial mean depth (`wave_energy`), computed on the
wafer in fp32: the total energy less the rest energy lost it to cancellation.

Oppelstrup et al. (arXiv:2511.11542) run finite-difference shallow water under Domain
Translation; their exact discretisation was not read here (the sources at hand give the
method and the scale), so this is the textbook C-grid scheme named above, not theirs.

`shallow_water(grid, g, dt)` returns `step_fn(SweState) -> SweState`; `mass`, `energy`,
`wave_energy` are the diagnostics (wafer-wide reductions through the fabric); `run_swe(spec,
SweConfig(...))` is the shell of `wse hpc swe` (a Gaussian hump, drifts, `.report`).

Domain Translation (`translate=True`): after every step the whole state moves one PE east
(a periodic fabric shift of each field), so the grid's association with the PEs drifts one
column a step and data crosses from one system's columns to the next in one direction
only, as Oppelstrup et al. shift the processor-grid association each step; the stencil's
arithmetic is unchanged, so the result, moved back on the host, equals the plain run's bit
for bit where the mesh splits the columns over devices (1 x 2 to 2 x 4 tested, and two
`jax.distributed` processes standing for two systems). Where one device holds every column
(1 x 1, 2 x 1) it agrees to a few fp32 ulps of h, not bit for bit (hunt 72: 2.4e-7 after 20
steps on 16 x 16): XLA:CPU contracts multiplies and adds into FMAs as its code for each fused
loop allows, and the translated state sits one column further each step, so some cells
round once where the plain run rounds twice (equal with `--xla_cpu_max_isa=AVX`, no FMA);
an optimization barrier around the move does not change that.
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import jax
import numpy as np
from jax import lax
from wse_core import RunReport, WaferSpec, fabric
from wse_core.cost.perf import serial
from wse_core.errors import is_finite, require_int, shown_setting

from wse_hpc.fields.grid import Field, FieldError, FieldGrid, field_grid, record_shift
from wse_hpc.fields.operators import (
    divergence,
    face_gradient,
    interpolate,
    mean,
    neighbour,
    total,
)
from wse_hpc.fields.perf import assumptions, traced_step
from wse_hpc.stencil.config import INT32_MAX

__all__ = [
    "RK3_STAGES",
    "SweRun",
    "SweState",
    "energy",
    "wave_energy",
    "mass",
    "SweConfig",
    "check_config",
    "run_swe",
    "shallow_water",
    "swe_state",
    "translate",
]


MAX_CFL = 0.6  # RK3's imaginary-axis limit sqrt(3) over the C grid's largest 2 sqrt(2) c / h


class SweState(NamedTuple):
    h: Field  # total depth at centres
    u: Field  # x velocity on x faces
    v: Field  # y velocity on y faces


def swe_state(grid: FieldGrid, h, u, v) -> SweState:
    """Place `(nx, ny, 1)` arrays as the state (a periodic 2D grid)."""
    if grid.dims != 2 or not all(grid.periodic[:2]):
        raise FieldError("shallow water runs on a periodic 2D grid (NZ = 1, X and Y periodic)")
    return SweState(grid.field("h", h), grid.field("u", u, loc="x"), grid.field("v", v, loc="y"))


def _cross(w: Field, a: int) -> jax.Array:
    """The other velocity component w (on faces along b != a) at a's faces: the mean of
    its four values around the face, w(i, j), w(i + e_a), w(i - e_b), w(i + e_a - e_b)."""
    b = 1 - a
    wa = w.like(w.data + neighbour(w, a, 1))  # sum along a onto a's offset
    return 0.25 * (wa.data + neighbour(wa, b, -1))


def _rhs(s: SweState, g: float) -> SweState:
    grid = s.h.grid
    flux = [s.u * interpolate(s.h, 0).data, s.v * interpolate(s.h, 1).data]
    dh = -divergence(*flux)
    out = []
    for a, (c, w) in enumerate(((s.u, s.v), (s.v, s.u))):
        b = 1 - a
        own = (neighbour(c, a, 1) - neighbour(c, a, -1)) / (2 * grid.spacing[a])
        other = (neighbour(c, b, 1) - neighbour(c, b, -1)) / (2 * grid.spacing[b])
        adv = c * own + c.like(_cross(w, a)) * other
        out.append(-(adv + g * face_gradient(s.h, a).data))
    return SweState(dh, out[0], out[1])


# SSP-RK3's stages: each evaluates `_rhs` on the previous stage's state, so each reads its own
# halo (on a cluster: one dependent message between systems per stage, `cluster.crossing_work`)
RK3_STAGES = 3


def shallow_water(grid: FieldGrid, *, g: float = 9.81, dt: float):
    """`step_fn(state) -> state`: one SSP-RK3 step (Shu & Osher) of the scheme above."""
    del grid  # the fields carry it

    def plus(x: SweState, c: float, *ks: SweState) -> SweState:
        """x + c * sum(ks): increments only, so a constant h is never rescaled (a
        convex combination of states would round every cell the same way and move the
        mass by a bias, not by the telescoping fluxes)."""
        total = [sum(parts[1:], parts[0]) for parts in zip(*ks, strict=True)]
        return SweState(*(p + c * q for p, q in zip(x, total, strict=True)))

    def step_fn(s: SweState) -> SweState:
        k1 = _rhs(s, g)
        k2 = _rhs(plus(s, dt, k1), g)
        k3 = _rhs(plus(s, 0.25 * dt, k1, k2), g)
        return plus(s, dt / 6, k1, k2, _times(k3, 4.0))

    return step_fn


def translate(s: SweState) -> SweState:
    """Every field one PE east, periodic: Domain Translation's move of the association."""
    out = []
    for f in s:
        record_shift("E", f.grid.nz)
        out.append(f.like(fabric.shift(f.grid.wafer, f.data, "E", boundary="periodic")))
    return SweState(*out)


def _times(k: SweState, c: float) -> SweState:
    return SweState(*(c * x for x in k))


def mass(s: SweState) -> jax.Array:
    """sum(h) times the cell area."""
    hx, hy, _ = s.h.grid.spacing
    return total(s.h) * hx * hy


def energy(s: SweState, g: float = 9.81) -> jax.Array:
    """sum(h (u^2 + v^2) / 2 + g h^2 / 2) times the cell area (velocities' squares averaged
    from their faces to the centre)."""
    hx, hy, _ = s.h.grid.spacing
    ke = interpolate(s.u * s.u, 0) + interpolate(s.v * s.v, 1)
    return total(0.5 * s.h * ke + (0.5 * g) * s.h * s.h) * hx * hy


def wave_energy(s: SweState, g: float, mean_depth: float) -> jax.Array:
    """The energy above the same mass at rest: sum(h (u^2 + v^2) / 2 + g (h - H)^2 / 2)
    times the cell area, H the mean depth (`energy` less g H^2 / 2 per unit area, exactly
    where sum(h - H) = 0, as the conserved mass keeps it to round-off). Every term is of
    the wave's size, so fp32 holds it to its sum's rounding, ~1e-6 of itself (2e-6 on 64 x 64
    over a 1 x 2 mesh): a relative change well above that is the scheme's, one near it is
    not resolved (hunt 72, `wse hpc swe`: n 64, 200 steps -7.92e-4 printed, float64 of the
    same fields -7.90e-4; n 128, 10 steps -2.42e-6 against -2.33e-6). `energy` less the rest
    energy cancelled ~0.9997 of an fp32 total (n 64: 7.8e-3 printed, unsigned)."""
    hx, hy, _ = s.h.grid.spacing
    ke = interpolate(s.u * s.u, 0) + interpolate(s.v * s.v, 1)
    d = s.h - mean_depth
    return total(0.5 * s.h * ke + (0.5 * g) * d * d) * hx * hy


class SweRun(NamedTuple):
    h: np.ndarray  # (nx, ny) final depth
    mass_drift: float  # relative
    # signed change of the wave energy (`wave_energy`, about the initial mean depth) over
    # the run, relative to the initial wave energy: (W(end) - W(0)) / W(0), < 0 damped
    energy_drift: float
    steps: int
    report: RunReport


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweConfig:
    """One shallow-water run: `n x n` cells, `steps` steps at `cfl` of the gravity-wave
    limit, a Gaussian hump of `amplitude` on depth 1; Domain Translation when asked."""

    n: int
    steps: int
    g: float = 9.81
    cfl: float = 0.4
    amplitude: float = 0.1
    mesh_shape: tuple[int, int] | None = None
    defect_seed: int | None = None
    translate_domain: bool = False


def check_config(cfg: SweConfig) -> None:
    """FieldError naming the setting, what was given and what is allowed, before anything is
    placed or compiled (as `md.run_setup.check_config`; hunt 72: steps 2.5 or True and n "8"
    were JAX and Python TypeErrors, g inf ran to NaN, amplitude -0.5 was refused by a line
    that did not name it). The grid's fit is checked where it is placed (`field_grid`)."""
    require_int("n", cfg.n, 3, error=FieldError)  # a centred difference needs 3 cells a side
    require_int("steps", cfg.steps, 0, INT32_MAX, error=FieldError)  # fori_loop's int32 count
    if not (is_finite(cfg.g) and cfg.g > 0):
        raise FieldError(f"g must be a positive finite number, got {shown_setting(cfg.g)}")
    if not (is_finite(cfg.cfl) and 0 < cfg.cfl <= MAX_CFL):
        raise FieldError(
            f"cfl must be a number in (0, {MAX_CFL}] (RK3's limit on the C grid), got "
            f"{shown_setting(cfg.cfl)}"
        )
    if not (is_finite(cfg.amplitude) and 0 <= cfg.amplitude < 1):
        raise FieldError(
            "amplitude must be a number in [0, 1) (the hump over depth 1), got "
            f"{shown_setting(cfg.amplitude)}"
        )
    if not isinstance(cfg.translate_domain, bool):
        raise FieldError(
            f"translate_domain must be True or False, got {shown_setting(cfg.translate_domain)}"
        )


def run_swe(spec: WaferSpec, cfg: SweConfig) -> SweRun:
    """A Gaussian hump of `amplitude` on depth 1 in the periodic unit square, `steps` steps
    at `cfl` of the gravity-wave limit h / sqrt(g h_max); mass and energy drifts and the
    `RunReport` (each step priced from its recorded program)."""
    n, steps, g, cfl, amplitude = cfg.n, cfg.steps, cfg.g, cfg.cfl, cfg.amplitude
    mesh_shape, defect_seed, translate_domain = (
        cfg.mesh_shape,
        cfg.defect_seed,
        cfg.translate_domain,
    )
    check_config(cfg)
    grid = field_grid(spec, (n, n, 1), periodic=(True, True, True), mesh_shape=mesh_shape,
                      defect_seed=defect_seed)  # fmt: skip
    x = (np.arange(n) + 0.5) / n
    X, Y = np.meshgrid(x, x, indexing="ij")
    h0 = 1.0 + amplitude * np.exp(-((X - 0.5) ** 2 + (Y - 0.5) ** 2) / 0.02)
    zero = np.zeros((n, n, 1))
    s0 = swe_state(grid, h0[..., None], zero, zero)
    # hunt 62: a Python float, weakly typed: NumPy's float64 made the float32 loop carry
    # float64 under JAX_ENABLE_X64=1 (fori_loop refused the step)
    dt = float(cfl / n / np.sqrt(g * (1 + amplitude)))
    plain = shallow_water(grid, g=g, dt=dt)
    step = (lambda x: translate(plain(x))) if translate_domain else plain
    run = jax.jit(lambda s: lax.fori_loop(0, steps, lambda i, x: step(x), s))
    jax.block_until_ready(run(s0))  # compile
    t0 = time.perf_counter()
    s1 = jax.block_until_ready(run(s0))
    wall = time.perf_counter() - t0
    m0, m1 = float(mass(s0)), float(mass(s1))
    depth = float(mean(s0.h))  # H of `wave_energy`: the initial mean depth
    e0, e1 = (float(wave_energy(s, g, depth)) for s in (s0, s1))
    # signed: RK3 and the centred scheme change it (module docstring); amplitude 0 is a lake
    # at rest, no wave energy, and it keeps none
    drift = (e1 - e0) / e0 if e0 else (0.0 if e1 == 0 else float("nan"))
    # the run is its steps (hunt 68: zero steps were priced as one, as cfd's were)
    one, traffic = traced_step(grid, step, s0)  # hunt 70: its traffic was reported as 0
    phases = serial(one, name="run", repeat=steps)
    report = RunReport.build("swe", spec, phases, measured_wall_s=wall, units="timesteps",
                             traffic=traffic.scaled(steps), sram=grid.wafer.sram.summary(),
                             reads=grid.wafer.sram.sized_reads(),  # its fit (hunt 82)
                             assumptions=assumptions(grid),
                             extra=lambda t: {"grid": [n, n], "steps": steps, "dt": dt,
                                    "g": g, "cfl": cfl,  # hunt 75: a report names them
                                    "predicted_s_per_step": t.leaf(one.name).seconds,
                                    "domain_translation": translate_domain})  # fmt: skip
    h = grid.gather(s1.h)[..., 0]
    h = np.roll(h, -steps, axis=1) if translate_domain else h  # back to the grid's frame
    return SweRun(h, abs(m1 - m0) / m0, drift, steps, report)
