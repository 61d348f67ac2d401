"""The PEs' own pair loops on a CPU (`md.pe_pairs`, numba): in float32 the list kernel's
forces, energies and virial with them (each pair once on one device, full lists on
several) against the NumPy float64 oracle and against XLA's list
kernel, a Cu-Ni alloy (every spline table of two elements)."""

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_core.hw.wafer import build_wafer
from wse_hpc.md import mapping, pe_pairs
from wse_hpc.md.eam import EamPlan, geometry, sram_plan
from wse_hpc.md.neighbour_plan import active_per_block, list_caps
from wse_hpc.md.neighbours import neighbour_fns
from wse_hpc.md.reference import eam_reference
from wse_hpc.md.state import Atoms
from wse_hpc.md.testing import perturbed
from wse_hpc.md.zhou04 import zhou04

POT = zhou04(["Cu", "Ni"], knots=500)
pytestmark = pytest.mark.skipif(not pe_pairs.available(), reason="numba not installed")


def _forces(s, sp, mesh):
    """The float32 list kernel's results in atom order, on CPU devices on any host: the PE
    pair loops are CPU FFI targets, which `neighbours` uses only on a CPU mesh (on a GPU,
    the default backend, no pair kernel was made: `seen` stayed empty, an IndexError)."""
    with jax.default_device(jax.devices("cpu")[0]):
        return _forces_on_cpu(s, sp, mesh)


def _forces_on_cpu(s, sp, mesh):
    grid = mapping.choose_grid(s.num_atoms)
    cpus = jax.devices("cpu")[: mesh[0] * mesh[1]]
    wafer = build_wafer(preset("small"), grid=grid, mesh_shape=mesh, devices=cpus)
    state = mapping.pack(
        mapping.initial_map(s.positions_A, grid, s.box_A), s.positions_A, sp, dtype=np.float32
    )
    reach = POT.cutoff_A + 1.0
    kr, kc = mapping.window_needed(state, s.box_A, reach + 0.5)
    caps = list_caps(state, s.box_A, reach, kr, kc)
    plan = EamPlan(kr, kc, tuple(s.box_A), "float32", 1.0, caps, active_per_block(state, wafer))
    sram_plan(wafer, POT, plan)
    fns = neighbour_fns(wafer, POT, plan)
    placed, geo = Atoms.of(wafer.place(state)), geometry(wafer)
    nbrs, over = jax.jit(fns.build_fn)(placed, geo)
    out = jax.jit(fns.forces_fn)(placed, geo, nbrs)
    at = mapping.unpack(state, s.num_atoms)["pe_flat_index"]
    assert not bool(over)
    return {
        "forces": wafer.gather(out.forces).reshape(-1, 3)[at].astype(np.float64),
        "energy": wafer.gather(out.energy).reshape(-1)[at].astype(np.float64),
        "virial": float(wafer.gather(out.virial).astype(np.float64).sum()),
    }


@pytest.mark.parametrize("mesh, half", [((1, 1), True), ((2, 4), False)])
def test_pe_pair_loops_match_the_oracle_and_the_xla_kernel(monkeypatch, mesh, half):
    s = perturbed("fcc", "Cu", 3.6, (4, 4, 5), 0.1, seed=3, symbols=("Cu", "Ni"))
    sp = s.species(POT.elements)
    ref = eam_reference(POT, s.positions_A, sp, s.box_A)
    seen = []
    real = pe_pairs.pair_kernel
    monkeypatch.setattr(pe_pairs, "pair_kernel", lambda *a: seen.append(real(*a)) or seen[-1])
    got = _forces(s, sp, mesh)
    assert seen, "neighbours made no PE pair kernel for a float32 list on a CPU mesh"
    k = seen[-1]
    assert k.half == half  # one device: each pair once; several: full lists
    monkeypatch.setattr(pe_pairs, "available", lambda: False)
    xla = _forces(s, sp, mesh)
    scale = np.abs(ref.forces_eV_A).max()
    # float32 sums of ~40 pairs per atom: a few ulps of the largest term
    np.testing.assert_allclose(got["forces"], ref.forces_eV_A, atol=2e-5 * scale)
    np.testing.assert_allclose(got["energy"], ref.energy_eV, rtol=2e-6, atol=2e-5)
    assert got["virial"] == pytest.approx(ref.virial_eV, rel=1e-5)
    # and as close to XLA's float32 list kernel as both are to the oracle
    err_xla = np.abs(xla["forces"] - ref.forces_eV_A).max()
    assert np.abs(got["forces"] - xla["forces"]).max() <= 2 * err_xla + 1e-6 * scale
