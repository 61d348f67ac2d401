"""Field operators and arithmetic against the NumPy scheme (`wse_hpc.fields.reference`).

Meshes 1x1, 2x4 and 4x2 on grids they do not divide (9 x 11), with and without dead PEs,
periodic / Dirichlet / Neumann axes, centred and MAC face fields.
"""

import jax
import numpy as np
import pytest
from wse_core import PRESETS, SramBudgetError
from wse_hpc.fields import (
    FieldError,
    advect,
    dirichlet,
    divergence,
    face_gradient,
    field_grid,
    gradient,
    interpolate,
    laplacian,
    neumann,
    periodic,
    program,
    total,
)
from wse_hpc.fields import reference as ref

# fp32 operators against fp64 NumPy on fp32-rounded inputs: a few roundings of O(1/h^2)
# terms, relative to the largest value.
RTOL32 = 2e-6
SHAPE3 = (9, 11, 5)
SHAPE2 = (9, 11, 1)
BCS = {
    "walls": (dirichlet(0.25, -0.5), neumann(), dirichlet(1.0, 0.0)),
    "mixed": (dirichlet(0.5, 0.0), periodic(), neumann()),
    "periodic": (periodic(), periodic(), periodic()),
}


def _rel(a, b):
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)


def _grid(shape, bcs, mesh, defect_seed=None):
    per = tuple(b.kind == "periodic" for b in bcs)
    return field_grid(
        PRESETS["small"], shape, periodic=per, mesh_shape=mesh, defect_seed=defect_seed,
        lengths=(1.0, 1.3, 0.7),
    )  # fmt: skip


def _data(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32).astype(np.float64)


def _all_ops(f, u, v, w, uc, vc, wc):
    face = (u, v, w)[: len(gradient(f))]
    cent = (uc, vc, wc)[: len(face)]
    return (
        laplacian(f),
        *gradient(f),
        face_gradient(f, 0),
        face_gradient(f, 1),
        divergence(*face),
        divergence(*cent),
        advect(f, face, "upwind"),
        advect(f, face, "central"),
        advect(f, cent, "upwind"),
        advect(f, cent, "central"),
        interpolate(f, 1),
        interpolate(u, 0),
        laplacian(u),
    )


def _expected(shape, h, bcs, d):
    f, u, v, w, uc, vc, wc = d
    n = 2 if shape[2] == 1 else 3
    face, cent = (u, v, w)[:n], (uc, vc, wc)[:n]
    locs, clocs = ("x", "y", "z")[:n], ("c",) * n
    return (
        ref.laplacian_np(f, h, bcs),
        *ref.gradient_np(f, h, bcs),
        ref.face_gradient_np(f, 0, h, bcs),
        ref.face_gradient_np(f, 1, h, bcs),
        ref.divergence_np(face, h, (bcs,) * n, locs),
        ref.divergence_np(cent, h, (bcs,) * n, clocs),
        ref.advect_np(f, face, h, bcs, (bcs,) * n, locs, "upwind"),
        ref.advect_np(f, face, h, bcs, (bcs,) * n, locs, "central"),
        ref.advect_np(f, cent, h, bcs, (bcs,) * n, clocs, "upwind"),
        ref.advect_np(f, cent, h, bcs, (bcs,) * n, clocs, "central"),
        ref.interpolate_np(f, 1, bcs, "c"),
        ref.interpolate_np(u, 0, bcs, "x"),
        ref.laplacian_np(u, h, bcs, "x"),
    )


def _check_ops(shape, bcs, mesh, defect_seed=None):
    g = _grid(shape, bcs, mesh, defect_seed)
    d = [_data(shape, s) for s in range(7)]
    locs = ("c", "x", "y", "z", "c", "c", "c")
    fields = [
        g.field(f"a{i}", x, loc=loc, bc=bcs) for i, (x, loc) in enumerate(zip(d, locs, strict=True))
    ]
    got = jax.jit(_all_ops)(*fields)
    want = _expected(shape, g.spacing, bcs, d)
    errs = [_rel(g.gather(a), b) for a, b in zip(got, want, strict=True)]
    assert max(errs) < RTOL32, errs
    return [g.gather(a) for a in got]


@pytest.mark.parametrize("mesh", [(1, 1), (2, 4), (4, 2)])
@pytest.mark.parametrize(
    "bcs", ["walls", pytest.param("mixed", marks=pytest.mark.slow), "periodic"]
)
def test_operators_3d_match_numpy(mesh, bcs):
    _check_ops(SHAPE3, BCS[bcs], mesh)


@pytest.mark.parametrize("mesh", [(1, 1), (2, 4)])
def test_operators_2d_match_numpy(mesh):
    _check_ops(SHAPE2, BCS["walls"], mesh)


@pytest.mark.cpu_devices  # a 2 x 4 mesh of CPU devices
def test_dead_pes_change_nothing():
    """A wafer with dead PEs (remapped around) gives the same fields bit for bit."""
    bcs = BCS["mixed"]
    clean = _check_ops(SHAPE3, bcs, (2, 4))
    holed = _check_ops(SHAPE3, bcs, (2, 4), defect_seed=3)
    g = _grid(SHAPE3, bcs, (2, 4), defect_seed=3)
    assert g.wafer.defects is not None and g.wafer.defects.dead.any()
    for a, b in zip(clean, holed, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.cpu_devices  # a 2 x 4 mesh of CPU devices
def test_arithmetic_is_numpy_and_recorded():
    bcs = BCS["walls"]
    g = _grid(SHAPE3, bcs, (2, 4))
    a0, b0 = _data(SHAPE3, 1), _data(SHAPE3, 2) + 3.0
    a, b = g.field("a", a0, bc=bcs), g.field("b", b0, bc=bcs)

    def expr(a, b):
        return (2.0 * a + b) / b - abs(a) * 0.5 + (1.0 - a).maximum(b * 0.1)

    with program() as prog:
        out = jax.jit(expr)(a, b)
    want = (2 * a0 + b0) / b0 - abs(a0) * 0.5 + np.maximum(1 - a0, b0 * 0.1)
    assert _rel(g.gather(out), want) < RTOL32
    kinds = sorted(op.kind for _, op in prog.ops)
    assert kinds == sorted(["mul", "add", "div", "abs", "mul", "sub", "sub", "mul", "max", "add"])
    assert all(op.length == SHAPE3[2] and s == "" for s, op in prog.ops)
    assert float(total(a)) == pytest.approx(a0.sum(), rel=1e-5)


def test_fields_are_declared_in_the_sram_ledger():
    bcs = BCS["walls"]
    g = _grid(SHAPE3, bcs, (1, 1))
    before = g.wafer.sram.used_bytes()
    g.field("T", 0.0, bc=bcs)
    g.field("T", 1.0, bc=bcs)  # the same array placed again: declared once
    g.field("p", 0.0, bc=bcs)
    assert g.wafer.sram.used_bytes() - before == 2 * SHAPE3[2] * 4
    big = _grid((9, 11, 4000), bcs, (1, 1))
    fit = big.wafer.sram.free_bytes() // (4000 * 4)  # Z columns that fit: a hand count
    for i in range(fit):
        big.field(f"f{i}", 0.0, bc=bcs)
    with pytest.raises(SramBudgetError, match="field 'x'.* 16000 B per PE"):
        big.field("x", 0.0, bc=bcs)


def test_bad_boundaries_and_locations_are_refused():
    g = _grid(SHAPE3, BCS["walls"], (1, 1))
    with pytest.raises(FieldError, match="axis y is dirichlet or neumann, got periodic"):
        g.field("u", 0.0, bc=(neumann(), periodic(), neumann()))
    with pytest.raises(FieldError, match="location"):
        g.field("u", 0.0, loc="q", bc=BCS["walls"])  # type: ignore[arg-type]
    with pytest.raises(FieldError, match="X and Y need >= 3"):
        field_grid(PRESETS["small"], (2, 8, 4))
