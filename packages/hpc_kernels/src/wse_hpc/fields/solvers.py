"""Implicit solves on the fabric: CG, Jacobi-preconditioned CG and BiCGSTAB over any field operator.

Each factory takes `apply_fn(Field) -> Field`, an operator built from
`wse_hpc.fields.operators` (so any stencil, any boundary condition: periodic, Dirichlet,
Neumann, mixed), and returns `solve_fn(b, x0=None) -> SolveResult`, one `lax.while_loop` the
shell jits. An operator whose fields carry wall values (`dirichlet(1, 0)`) is affine,
A x = L x + A(0): both solvers solve L x = b - A(0), the walls' constant moved into the
right-hand side as a CFD code assembles it (`wse_hpc.fields.affine.split`, A(0) probed when
the solve is traced; a linear operator is solved as it is), so that A x = b; their
`residual` is then relative to ||b - A(0)||, x = 0's (hunt 82: the walls' constant stayed in
the Krylov recurrence, and b = 0 returned a wrong x with `converged` True and residual 0).
Where b - A(0) = 0, x = 0 solves it (for a linear A: b = 0, as SciPy) and `residual` is the
absolute ||b - A x||, so 0 only for an x that solves A x = b. `SolveResult.info` is SciPy's
(0 converged, > 0 the iterations of a solve that did not converge, < 0 a BiCGSTAB that broke
down: `breakdowns`, `message()`). Vectors are fp32 fields; every dot product is one
wafer-wide fp32 reduction through `wse_core.fabric.reduce`. Both stop by SciPy's rule,
||b - A x|| <= tol ||b|| (atol 0; `wse_hpc.stencil.bicgstab.correction_tol`, one rule for
the stack's solvers), with or without x0, on the true residual of the x they return, or
after `maxiter` iterations. Both factories refuse (FieldError) a tol that is not a finite
number in (0, 1) (a target of 1 or more is met by x = 0: SciPy returns x0 then, the stack
refuses it as its stencil solver does) and a maxiter that is not an integer >= 1, and
(LimitError) one past the HPC iteration limit (`wse_hpc.stencil.bicgstab.check_stop`; hunt
67: tol NaN returned x = 0 after 0 iterations, tol -0.5 ran as 0.5, maxiter 2.5 ran 3 and
10**12 failed inside JAX).

- `cg(apply_fn, precondition=None, nullspace=False)`: for symmetric positive (semi)definite
  A, e.g. the pressure Poisson `-laplacian` (`poisson`). `precondition` is a centred field of
  the inverse diagonal (Jacobi PCG: `jacobi_preconditioner`); Jacobi costs one multiply per
  cell and no traffic, where multigrid's coarse levels would leave most PEs idle and need
  shifts of 2, 4, 8 ... PEs, so it is the preconditioner that keeps a wafer's PEs busy (and
  on a constant-coefficient Laplacian it only corrects the wall rows). `nullspace=True`
  solves a singular system whose null space is the constants (all-periodic or all-Neumann
  Poisson), as the pressure Poisson's compatibility asks: b is projected to b_proj = b -
  mean(b) (the part of b no x can reach; `SolveResult.projected` says how much of b that
  was), x0 to zero mean (an x0's constant is the null space's: hunt 79, x0 = 1000 left x
  1.4 % off), the residual is re-projected every iteration (one more reduction, fused in the
  same allreduce on the wafer), every pass's x is folded back to zero mean (hunt 80: Jacobi's
  z = D^-1 r is not zero-mean at Neumann walls, the constant piled up in x and fp32 rounded
  away what mattered: x0 = 50 x random stopped unconverged after 84 of 2,000 iterations),
  and x is returned with zero mean: the least-squares solution of least norm, SciPy's
  `lstsq` / `pinv` one. `residual` is then ||b_proj - A x|| / ||b_proj|| (= ||b - A x|| /
  ||b|| for a consistent b, sum(b) = 0; else the caller's own ||b - A x|| / ||b|| is
  sqrt(residual^2 (1 - projected^2) + projected^2), the two parts being orthogonal) and
  `converged` says it met tol. The option is refused (FieldError) for an operator that does
  not map the constants to zero (`wse_hpc.fields.null_space`; hunt 80: Neumann x /
  Dirichlet y was accepted and a wrong x said converged).
  CG runs on the correction from 0 of a start x (x0, or 0) until its recurrence meets tol
  ||b||, folds it into x and checks the true residual (one SpMV and one reduction); where
  the truth misses tol (fp32 rounds b - A x0 at eps32 ||A|| ||x0||: hunt 79, x0 = 1000
  said converged at a true 1.7e-4, tol 1e-6) it runs another pass from there, while each
  gains (`wse_hpc.stencil.bicgstab.pass_again`, GAIN) and iterations are left; it returns
  the best pass's x (`keep_best`; review 79: a last pass may end worse). From an x0 that
  meets tol, and for b = 0 (x = 0 whatever x0, as SciPy), 0 iterations; `residual` is the
  truth, `converged` says it met tol.
- `bicgstab(apply_fn)`: for non-symmetric or indefinite A (implicit advection-diffusion,
  Helmholtz with periodic boundaries): not a second BiCGSTAB but the stack's one
  (`wse_hpc.stencil.refine`'s iteration: reliable updates, stopping on the true residual)
  over `field_operator(apply_fn, b)`, in fp32; its residual is the true one of the x it
  returns, its target tol ||b|| with or without x0, as SciPy's: an x0's correction is
  solved to tol ||b|| / ||b - A x0||, known only on the wafer (refine's `solve_fn(rhs,
  target=)`), folded into x0 and solved once more from there (a large x0's b - A x0 is
  rounded in fp32); `converged` says whether fp32 met tol. A breakdown (rho, omega or
  (r^, A p) zero: a skew-symmetric operator, central advection without diffusion, has (r, A
  r) = 0 for every r) restarts from the true residual; one that breaks down again ends the
  solve (`refine`'s `broke_down`: info BREAKDOWN_INFO, where SciPy's bicgstab returns -10 or
  -11; hunt 82: 200 of 200 iterations spent into the same breakdown, reported only as not
  converged).
- `cg_iteration_cap(template, tol)`: a cap that scales with the grid, for callers that
  would otherwise stop a large Poisson solve short (hunt 72: a fixed 500 stopped every
  solve of a 256 x 256 cavity, max |div u| 0.028 against 1.2e-4 on 64 x 64, unsaid).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from wse_hpc.fields.affine import split
from wse_hpc.fields.grid import Field, FieldError, scope
from wse_hpc.fields.null_space import check_null_space
from wse_hpc.fields.operators import (
    axes,
    dot,
    homogeneous,
    laplacian,
    laplacian_diagonal,
    mean,
)
from wse_hpc.stencil.bicgstab import (
    PASS_FLOOR,
    Operator,
    check_stop,
    correction_tol,
    keep_best,
    pass_again,
    residual_met,
)
from wse_hpc.stencil.refine import CERTIFY_FLOOR, PAIR_BELOW, refine

__all__ = [
    "SolveResult",
    "bicgstab",
    "cg",
    "cg_iteration_cap",
    "field_operator",
    "jacobi_preconditioner",
    "poisson",
]

ApplyFn = Callable[[Field], Field]
TINY = 1e-30  # guards divisions by a dot product that is exactly zero (a converged residual)
BREAKDOWN_INFO = -1  # SolveResult.info of a BiCGSTAB solve that stopped on its breakdowns


def _info(converged, broke_down, iterations) -> jax.Array:
    """SciPy's `info` (SolveResult): 0, BREAKDOWN_INFO, or the iterations done."""
    return jnp.where(converged, 0, jnp.where(broke_down, BREAKDOWN_INFO, iterations))


def _relative(t, bnorm) -> jax.Array:
    """t / ||b||, or t itself where b = 0: a residual of 0 only where x solves A x = b."""
    return jnp.where(bnorm > 0, t / jnp.maximum(bnorm, TINY), t)


class SolveResult(NamedTuple):
    x: Field
    iterations: jax.Array  # int32
    # fp32 ||b - A x|| / ||b - A(0)||, the true residual of the x returned relative to x = 0's
    # (||b|| for a linear A; an affine one's wall terms moved into b: the module docstring);
    # with cg's nullspace=True of b_proj = b - mean(b); ||b - A x|| itself (absolute) where
    # b - A(0) = 0, so that 0 means x solves A x = b; NaN where cg(nullspace=True) could only
    # check its operator inside jit and found it not singular on the constants
    residual: jax.Array
    converged: jax.Array  # bool: residual <= tol, or 0 where b - A(0) = 0 (see the solvers)
    # fp32 ||b - b_proj|| / ||b||: the share of b that cg's nullspace=True projected away (a
    # pressure Poisson's incompatible part, sum(b) != 0); 0 without the option
    projected: jax.Array | float = 0.0
    # int32: BiCGSTAB's breakdowns (rho = (r^, r) or omega zero, or a step that is not
    # finite: (r^, A p) zero), each restarted from the true residual; cg: 0
    breakdowns: jax.Array | int = 0
    # int32, SciPy's `info`: 0 converged; > 0 not converged after `info` iterations (the cap,
    # or fp32's floor: `residual` says how far); < 0 broke down (BREAKDOWN_INFO: BiCGSTAB
    # stopped on breakdowns in a row without progress, where SciPy returns -10 or -11)
    info: jax.Array | int = 0

    def message(self) -> str:
        """One line of what the solve did (concrete values: outside jit)."""
        its, res, info = int(self.iterations), float(self.residual), int(self.info)
        if info == 0:
            return f"converged in {its} iterations (residual {res:.3g})"
        if info < 0:
            return (
                f"broke down after {its} iterations ({int(self.breakdowns)} BiCGSTAB "
                f"breakdowns, residual {res:.3g}; SciPy's bicgstab returns info -10 / -11 "
                "there): (r^, A p), rho or omega vanished again from the true residual's "
                "restart, as on a skew-symmetric operator (central advection without "
                "diffusion), where BiCGSTAB takes no step; add diffusion or upwind it"
            )
        return f"not converged after {its} iterations (residual {res:.3g} above tol)"


def poisson(template: Field) -> ApplyFn:
    """`x -> -laplacian(x)` with template's BCs made homogeneous (symmetric, >= 0)."""
    bc = homogeneous(template).bc
    return lambda x: -laplacian(x.like(x.data, bc=bc))


def jacobi_preconditioner(template: Field) -> Field:
    """The inverse diagonal of `poisson(template)` as a centred field."""
    return template.like(-1.0 / laplacian_diagonal(homogeneous(template)).data)


# the cap below never under this: the flow solver's fixed cap before hunt 72, which the
# Jacobi-PCG of the grids up to 64 x 64 stays well within (192-200 iterations from rest there)
CG_CAP_FLOOR = 500


def cg_iteration_cap(template: Field, tol: float, floor: int = CG_CAP_FLOOR) -> int:
    """CG's worst-case iteration count for `poisson(template)` to reach `tol`, never below
    `floor`: O(n) on n cells a side (Jacobi-PCG's count grows as the grid's sqrt(kappa)).

    The rule: ||e_k||_A <= 2 ((sqrt(K) - 1) / (sqrt(K) + 1))^k ||e_0||_A for the condition
    number K (Saad, Iterative Methods for Sparse Linear Systems, 2nd ed. 2003, Thm 6.29),
    and ||r|| / ||r_0|| <= sqrt(K) ||e||_A / ||e_0||_A, so k = ln(2 sqrt(K) / tol) /
    ln((sqrt(K) + 1) / (sqrt(K) - 1)) iterations (about sqrt(K) ln(2 sqrt(K) / tol) / 2)
    reach ||r|| <= tol ||b||. K is bounded from the 5- / 7-point Laplacian's eigenvalues:
    the largest under sum_a 4 / h_a^2, the smallest nonzero the least over the axes of
    4 sin^2(pi / 2n) / h^2 (wall-bounded: Neumann or Dirichlet) or 4 sin^2(pi / n) / h^2
    (periodic), each the first mode along one axis. Jacobi's scaling only corrects the wall
    rows of a constant-coefficient Laplacian, so the bound is the unpreconditioned one.
    Measured (hunt 72): the cavity from rest takes 200 of the rule's 536 on 64 x 64."""
    grid = template.grid
    largest, smallest = 0.0, math.inf
    for a in axes(grid):
        n, h = grid.shape[a], grid.spacing[a]
        largest += 4.0 / h**2
        if n > 1:
            angle = math.pi / n if template.bc[a].kind == "periodic" else math.pi / (2 * n)
            smallest = min(smallest, 4.0 * math.sin(angle) ** 2 / h**2)
    root = math.sqrt(largest / smallest) if math.isfinite(smallest) else 1.0
    if root <= 1.0:  # a single cell, or a 2-cell periodic axis: a step or two
        return floor
    need = math.log(2.0 * root / tol) / math.log((root + 1.0) / (root - 1.0))
    return max(floor, math.ceil(need))


def _zero_mean(f: Field, on: bool) -> Field:
    return f - mean(f) if on else f


class _Cg(NamedTuple):
    x: Field  # the solution at the last true-residual check
    d: Field  # the correction since then (CG's iterate, from 0)
    r: Field  # the recurrence residual of x + d
    p: Field
    rz: jax.Array
    rr: jax.Array
    it: jax.Array
    stop2: jax.Array  # this pass's target for rr: (SciPy's tol ||b||, floored)^2
    t: jax.Array  # ||b - A x|| at the last check
    done: jax.Array  # bool
    best: tuple[Field, jax.Array]  # the checked x of least true residual, and that residual


def cg(
    apply_fn: ApplyFn,
    *,
    tol: float = 1e-6,
    maxiter: int = 1000,
    precondition: Field | None = None,
    nullspace: bool = False,
) -> Callable[..., SolveResult]:
    """(Preconditioned) conjugate gradients; see the module docstring."""
    check_stop(tol, maxiter, least=1, error=FieldError)

    def psolve(r: Field) -> Field:
        return r if precondition is None else r * precondition

    def solve_fn(b: Field, x0: Field | None = None) -> SolveResult:
        op, lift = split(apply_fn, b)  # an affine A: L x = b - A(0) (wse_hpc.fields.affine)
        b = b if lift is None else b - lift
        singular = check_null_space(apply_fn, b) if nullspace else None
        shift = 0.0  # ||b - b_proj|| = sqrt(N) |mean(b)|: ||b||^2 = ||b_proj||^2 + shift^2
        if nullspace:
            m = mean(b)
            b, shift = b - m, jnp.sqrt(float(b.grid.cells)) * jnp.abs(m)
        bnorm = jnp.sqrt(dot(b, b))
        whole = jnp.sqrt(bnorm**2 + shift**2)
        projected = jnp.where(whole > 0, shift / jnp.maximum(whole, TINY), 0.0)
        x = b * 0.0 if x0 is None else x0.like(jnp.where(bnorm > 0, x0.data, 0.0))  # as SciPy
        x = _zero_mean(x, nullspace)  # an x0's constant is the null space's: it must not count

        def _restart(x: Field, floored, it, before, best) -> _Cg:
            """A pass from x: its true residual r (one SpMV, one reduction), CG afresh on
            the correction from 0, to SciPy's tol ||b|| (`correction_tol`), not below
            PASS_FLOOR["fp32"] of ||r|| when `floored`; done unless `pass_again` (r misses
            tol, iterations left, a GAIN on the last check `before`): 0 iterations from an
            x0 that meets tol. `best` (x, t) so far: x where its t is lower (`keep_best`)."""
            r = _zero_mean(b - op(x), nullspace)
            z = psolve(r)
            rz, rr = dot(r, z), dot(r, r)
            t = jnp.sqrt(rr)
            ratio = jnp.minimum(correction_tol(tol, bnorm, t), 1.0)
            ratio = jnp.maximum(ratio, PASS_FLOOR["fp32"]) if floored else ratio
            done = ~pass_again(t, before, bnorm, tol, it < maxiter)
            best = (x, t) if best is None else keep_best(best, (x, t), best[1], t)
            return _Cg(x, b * 0.0, r, z, rz, rr, it, ratio**2 * rr, t, done, best)

        def body(s: _Cg) -> _Cg:
            with scope("cg_iteration"):
                s = _cg_step(s)
            # the pass ends (its target met, or the cap): fold the correction in, check the
            # true residual, and go on from it unless done (a 0-or-1-trip loop, as refine's)
            due = (s.rr <= s.stop2) | (s.it >= maxiter)
            return lax.while_loop(lambda c: c[0], check, (due, s))[1]

        def check(c: tuple[bool, _Cg]) -> tuple[bool, _Cg]:
            """Fold the pass's correction into x, back to zero mean with `nullspace` (hunt
            80: Jacobi's z left its constant in d, and fp32 x lost the rest under it)."""
            s = c[1]
            return False, _restart(_zero_mean(s.x + s.d, nullspace), True, s.it, s.t, s.best)

        def _cg_step(s: _Cg) -> _Cg:
            ap = op(s.p)
            alpha = s.rz / jnp.maximum(dot(s.p, ap), TINY)
            d = s.d + alpha * s.p
            r = _zero_mean(s.r - alpha * ap, nullspace)
            z = psolve(r)
            rz = dot(r, z)
            p = z + (rz / jnp.maximum(s.rz, TINY)) * s.p
            return s._replace(d=d, r=r, p=p, rz=rz, rr=dot(r, r), it=s.it + 1)

        # x0 = None: the first pass's target is tol ||b|| exactly (the counts of before)
        s0 = _restart(x, x0 is not None, jnp.int32(0), jnp.inf, None)
        s = lax.while_loop(lambda s: ~s.done, body, s0)
        # the best pass's x and its true residual (hunt 79: the fp32 recurrence said 1.6e-7
        # of an x whose truth was 1.7e-4, from x0 = 1000; review 79: a last pass may end
        # worse than the one before); for b = 0 (x = 0, as SciPy) the absolute ||b - A x||
        x, t = s.best
        res, met = _relative(t, bnorm), residual_met(t, bnorm, tol)
        if singular is not None:  # A read traced values: its probe ran here (no refusal)
            res, met = jnp.where(singular, res, jnp.nan), met & singular
        info = _info(met, False, s.it)
        return SolveResult(_zero_mean(x, nullspace), s.it, res, met, projected, jnp.int32(0), info)

    return solve_fn


def field_operator(apply_fn: ApplyFn, template: Field) -> Operator:
    """`apply_fn` as the stack's BiCGSTAB sees it (`wse_hpc.stencil.bicgstab.Operator`): a
    linear map of placed fp32 arrays (each wrapped as a field like `template`), unscaled
    (inv_d = 1, lambda_min = 1: only fp32, where the power-of-two scaling sigma just keeps
    the vectors' magnitude near 2^10)."""

    def apply(a: jax.Array) -> jax.Array:
        with scope("bicgstab_iteration"):  # the SpMVs, priced per iteration (fields.perf)
            return apply_fn(template.like(a)).data

    return Operator(template.grid, apply, apply, 1.0, 1.0, False)


def bicgstab(apply_fn: ApplyFn, *, tol: float = 1e-6, maxiter: int = 1000):
    """BiCGSTAB over any field operator: the stencil's solver (`wse_hpc.stencil.refine`'s
    iteration, fp32, reliable updates, stopping on the true residual, the correction an fp32
    pair below tol 1e-4 or with an x0) on `field_operator(apply_fn, b)`. `solve_fn(b,
    x0=None) -> SolveResult`. As SciPy's `bicgstab` (atol 0): it stops when ||b - A x|| <=
    tol ||b||, with or without `x0` (the target is relative to ||b||, never to ||b - A
    x0||), after 0 iterations when x0 already meets it, and returns x = 0 for b = 0.
    `residual` is the true residual ||b - A x|| / ||b|| of the fp32 x it returns, computed
    again on that x (hunt 75: measured before the correction was rounded into x0, it said
    6.3e-14 for an x at 3.0e-8), and `converged` says residual <= tol.

    With x0 it solves A d = b - A x0 (to tol ||b|| / ||b - A x0||, known only on the wafer,
    hence the pair) and folds the pair d into x0 with its rounding kept (TwoSum), then once
    more from that x on its own residual (`_pass`), within `maxiter` iterations in all. Why
    twice: b - A x0 in fp32 is only as good as eps32 ||A|| ||x0||, so a large x0 leaves
    x0 + d that far from the solution however well d is solved (hunt 75b, x0 = 1e4 x random
    on 16 x 12: 8.5e-4 after 139 iterations, tol 1e-5, SciPy's fp64 1e-5 in 88); the second
    pass starts from an x near the solution, whose residual fp32 computes well (7.0e-6 in 78
    iterations). The first pass stops at PASS_FLOOR["fp32"] (`wse_hpc.stencil.bicgstab`, the
    stack's one set with GAIN) relative to its right-hand side: below it that right-hand
    side's own rounding dominates; the x returned is the better pass's. `converged` is
    False where fp32 cannot meet tol: tol below eps32 ||A|| ||x|| / ||b|| (an fp32 x rounds
    there, whatever x0), or maxiter spent (an x0 so large that b is lost in b - A x0 needs a
    whole solve in each pass)."""
    check_stop(tol, maxiter, least=1, error=FieldError)
    pair = tol < PAIR_BELOW  # and with any x0 (solve_fn)

    def solve_fn(b: Field, x0: Field | None = None) -> SolveResult:
        op, lift = split(apply_fn, b)  # an affine A: L x = b - A(0) (wse_hpc.fields.affine)
        b = b if lift is None else b - lift
        bnorm = jnp.sqrt(dot(b, b))
        solve = refine(
            # with x0 the target relative to b - A x0 is traced and may lie far below tol
            b.grid, precision="fp32", tol=tol, maxiter=maxiter, pair=pair or x0 is not None,
            operator=field_operator(op, b),
        )  # fmt: skip
        run = functools.partial(_pass, op, solve, b, tol, maxiter)
        none, no = jnp.int32(0), jnp.bool_(False)
        if x0 is None:
            p = run(_Passed(b * 0.0, none, jnp.float32(1.0), none, no), 0.0)
        else:
            x0 = x0.like(jnp.where(bnorm > 0, x0.data, 0.0))  # b = 0: x = 0, as SciPy
            # the first pass stops at PASS_FLOOR["fp32"] relative to b - A x0 (below)
            p1 = run(_Passed(x0, none, jnp.float32(1.0), none, no), PASS_FLOOR["fp32"])
            p = run(p1, 0.0)
            # the better pass's x (review 79: a later pass may end worse; `keep_best`)
            x, residual = keep_best((p1.x, p1.residual), (p.x, p.residual), p1.residual,
                                    p.residual)  # fmt: skip
            p = p._replace(x=x, residual=residual, broke_down=p.broke_down | p1.broke_down)
        met = jnp.where(bnorm > 0, p.residual <= tol, p.residual == 0)
        info = _info(met, p.broke_down, p.its)
        return SolveResult(p.x, p.its, p.residual, met, jnp.float32(0.0), p.breakdowns, info)

    return solve_fn


# Why the first pass from an x0 stops at PASS_FLOOR["fp32"] (1e-6) relative to b - A x0:
# that right-hand side is rounded at eps32 ||A|| ||x0||, and solving it further only moves
# the rounding (16 x 12, tol 1e-5, x0 = 1e4 / 1e6 x random: floor 0: 151 / 215 iterations in
# all; 1e-7: 96 / 116; 1e-6: 78 / 105; SciPy's fp64 from x0: 88 / 102)


def _fold(x: Field, d: jax.Array, d_lo: jax.Array) -> Field:
    """x + (d + d_lo) in fp32 with the rounding of x + d kept (Knuth's TwoSum): x0 + d
    cancels to the solution when x0 is large, and d_lo then still counts."""
    s = x.data + d
    bb = s - x.data
    err = (x.data - (s - bb)) + (d - bb)
    return x.like(s + (err + d_lo))


class _Passed(NamedTuple):
    x: Field  # folded
    its: jax.Array  # iterations so far
    residual: jax.Array  # true, relative to ||b|| (`_relative`)
    breakdowns: jax.Array  # so far
    broke_down: jax.Array  # bool: this pass stopped on its breakdowns (refine's)


def _pass(apply_fn: ApplyFn, solve, b: Field, tol: float, maxiter: int, start: _Passed,
          floor: float) -> _Passed:  # fmt: skip
    """One refine solve from `start`'s x on b - A x, to tol ||b|| (not below `floor`
    relative to b - A x), within the iterations left after `start`'s; its counts added."""
    x, its = start.x, start.its
    bnorm = jnp.sqrt(dot(b, b))
    rhs = b - apply_fn(x)
    rnorm = jnp.sqrt(dot(rhs, rhs))
    # refine's certificate (true residual + CERTIFY_FLOOR <= tol) in ||b||'s units
    target = jnp.maximum(correction_tol(tol - CERTIFY_FLOOR, bnorm, rnorm), floor)
    met = residual_met(rnorm, bnorm, tol)  # x0 already meets tol (or r = 0): 0 iterations
    res = solve(rhs.data, target=jnp.where(met, jnp.inf, target), limit=maxiter - its)
    x = _fold(x, res.x, res.x_lo)
    r = b - apply_fn(x)
    residual = _relative(jnp.sqrt(dot(r, r)), bnorm)
    return _Passed(x, its + res.iterations, residual, start.breakdowns + res.breakdowns,
                   res.broke_down)  # fmt: skip
