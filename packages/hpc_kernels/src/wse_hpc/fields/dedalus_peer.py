"""Dedalus as a peer for the Rayleigh-Benard case: tests and benches only, never the runtime.

`dedalus_nusselt(DedalusConfig(ra=, pr=, ...)) -> DedalusRun` runs Dedalus 3's own 2D
Rayleigh-Benard example (examples/ivp_2d_rayleigh_benard: first-order tau formulation, RealFourier x
ChebyshevT bases, 3/2 dealiasing, RK222, the example's CFL controller) on the case of
`wse_hpc.fields.convection.rayleigh_benard`, and returns the Nusselt number
1 + <w b> / kappa averaged (weighted by the step) over the last `t_avg` free-fall times of a
run to `t_end`. Both codes use the same case, checked term by term:

- free-fall units: height 1, buoyancy b = T with T = 1 at z = 0 and 0 at z = 1,
  nu = (Ra / Pr)^-1/2, kappa = (Ra Pr)^-1/2 (the example's own definitions);
- no-slip plates (u = 0 at z = 0, 1), periodic sides of width `aspect` (the example's
  Lx = 4 replaced by ours, default 2);
- the initial state: conduction 1 - z plus `amplitude` sin(pi z) cos(2 pi x / aspect), the
  field layer's deterministic perturbation (the example's seeded noise replaced by it, so both
  codes pick the same single roll pair);
- Nu: the volume average of 1 + w T / kappa, as `wse_hpc.fields.flow.nusselt`.

Dedalus is imported inside the function: `pip install -e ".[peers]"` after Debian's
libopenmpi-dev, libfftw3-dev, libfftw3-mpi-dev and openmpi-bin (PLATFORM.md); callers skip
where it is absent (`pytest.importorskip("dedalus")`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import numpy as np

__all__ = ["DedalusConfig", "DedalusRun", "dedalus_nusselt"]


@dataclasses.dataclass(frozen=True)
class DedalusRun:
    nusselt: float  # time average over the last t_avg
    history: tuple[tuple[float, float], ...]  # (time, instantaneous Nu) every `every` steps
    steps: int
    wall_s: float  # the time loop alone (the solver's build excluded, reported apart)
    build_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedalusConfig:
    """One Dedalus run of the case: `nx` x `nz` modes, to `t_end`, Nu averaged over the last
    `t_avg` (free-fall times); the example's CFL capped at `max_dt`; history every `every`."""

    ra: float
    pr: float
    aspect: float = 2.0
    nx: int = 64
    nz: int = 32
    t_end: float = 100.0
    t_avg: float = 20.0
    amplitude: float = 1e-2
    max_dt: float = 0.125
    every: int = 50


def _problem(d3, ra: float, pr: float, aspect: float, nx: int, nz: int):
    """The example's equations, bases and boundary conditions: (problem, fields)."""
    coords = d3.CartesianCoordinates("x", "z")
    dist = d3.Distributor(coords, dtype=np.float64)
    xb = d3.RealFourier(coords["x"], size=nx, bounds=(0, aspect), dealias=3 / 2)
    zb = d3.ChebyshevT(coords["z"], size=nz, bounds=(0, 1), dealias=3 / 2)
    p, b = dist.Field(name="p", bases=(xb, zb)), dist.Field(name="b", bases=(xb, zb))
    u = dist.VectorField(coords, name="u", bases=(xb, zb))
    tau_p = dist.Field(name="tau_p")
    tau_b1, tau_b2 = dist.Field(name="tau_b1", bases=xb), dist.Field(name="tau_b2", bases=xb)
    tau_u1 = dist.VectorField(coords, name="tau_u1", bases=xb)
    tau_u2 = dist.VectorField(coords, name="tau_u2", bases=xb)
    kappa, nu = (ra * pr) ** -0.5, (ra / pr) ** -0.5
    _, ez = coords.unit_vector_fields(dist)
    lift_basis = zb.derivative_basis(1)

    def lift(a):
        return d3.Lift(a, lift_basis, -1)

    grad_u, grad_b = d3.grad(u) + ez * lift(tau_u1), d3.grad(b) + ez * lift(tau_b1)
    ns = {"p": p, "b": b, "u": u, "tau_p": tau_p, "tau_b2": tau_b2, "tau_u2": tau_u2,
          "grad_u": grad_u, "grad_b": grad_b, "lift": lift, "kappa": kappa, "nu": nu,
          "ez": ez}  # fmt: skip
    problem = d3.IVP([p, b, u, tau_p, tau_b1, tau_b2, tau_u1, tau_u2], namespace=ns)
    problem.add_equation("trace(grad_u) + tau_p = 0")
    problem.add_equation("dt(b) - kappa*div(grad_b) + lift(tau_b2) = - u@grad(b)")
    problem.add_equation("dt(u) - nu*div(grad_u) + grad(p) - b*ez + lift(tau_u2) = - u@grad(u)")
    problem.add_equation("b(z=0) = 1")
    problem.add_equation("u(z=0) = 0")
    problem.add_equation("b(z=1) = 0")
    problem.add_equation("u(z=1) = 0")
    problem.add_equation("integ(p) = 0")
    return problem, dist, (xb, zb), u, b, ez, kappa


def dedalus_nusselt(cfg: DedalusConfig) -> DedalusRun:
    """Dedalus's Rayleigh-Benard example on our case (see the module)."""
    import dedalus.public as d3

    logging.getLogger("dedalus").setLevel(logging.WARNING)
    logging.getLogger("subsystems").setLevel(logging.WARNING)
    logging.getLogger("solvers").setLevel(logging.WARNING)
    t0 = time.perf_counter()
    problem, dist, (xb, zb), u, b, ez, kappa = _problem(
        d3, cfg.ra, cfg.pr, cfg.aspect, cfg.nx, cfg.nz
    )
    solver = problem.build_solver(d3.RK222)
    x, z = dist.local_grids(xb, zb)
    b["g"] = 1 - z + cfg.amplitude * np.sin(math.pi * z) * np.cos(2 * math.pi * x / cfg.aspect)
    cfl = d3.CFL(solver, initial_dt=cfg.max_dt, cadence=10, safety=0.5, threshold=0.05,
                 max_change=1.5, min_change=0.5, max_dt=cfg.max_dt)  # fmt: skip
    cfl.add_velocity(u)
    nu_op = 1 + d3.Integrate(ez @ u * b, ("x", "z")) / (cfg.aspect * kappa)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    acc, span, history = 0.0, 0.0, []
    while solver.sim_time < cfg.t_end - 1e-12:
        dt = min(cfl.compute_timestep(), cfg.t_end - solver.sim_time)
        solver.step(dt)
        inst = None
        if solver.sim_time > cfg.t_end - cfg.t_avg:
            inst = float(np.ravel(nu_op.evaluate()["g"])[0])
            acc, span = acc + inst * dt, span + dt
        if solver.iteration % cfg.every == 0:
            inst = inst if inst is not None else float(np.ravel(nu_op.evaluate()["g"])[0])
            history.append((float(solver.sim_time), inst))
            if not math.isfinite(inst):
                raise FloatingPointError(f"Dedalus blew up at t = {solver.sim_time:.3g}")
    return DedalusRun(acc / max(span, 1e-300), tuple(history), solver.iteration,
                      time.perf_counter() - t0, build)  # fmt: skip
