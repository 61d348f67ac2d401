"""The one-device list build that tests each pair of PEs once (`pe_build_numba.build_pairs`)
against the build that tests every window slot of every PE (`pe_build_numba.build`, whose
lists the list kernels' oracle tests check): the same index, species, count and overflow
arrays, bit for bit, on thermal Cu-Ni crystals with empty PEs on two grids, and with
capacities too small (overflow flags raised)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import preset
from wse_core.hw.wafer import build_wafer
from wse_hpc.md import mapping, pe_pairs
from wse_hpc.md.eam import EamPlan, geometry
from wse_hpc.md.neighbour_plan import active_per_block, list_caps
from wse_hpc.md.neighbours import _block_ids
from wse_hpc.md.neighbours.build import list_spec
from wse_hpc.md.state import Atoms
from wse_hpc.md.testing import perturbed
from wse_hpc.md.zhou04 import zhou04

POT = zhou04(["Cu", "Ni"], knots=200)
SKIN_A = 1.0
pytestmark = pytest.mark.skipif(not pe_pairs.available(), reason="numba not installed")


def _inputs(cells, grid, caps_scale: float):
    """The build kernels' arguments for a perturbed crystal on one CPU device."""
    s = perturbed("fcc", "Cu", 3.6, cells, 0.15, seed=5, symbols=("Cu", "Ni"))
    sp = s.species(POT.elements)
    wafer = build_wafer(preset("small"), grid=grid, devices=jax.devices("cpu")[:1])
    state = mapping.pack(
        mapping.initial_map(s.positions_A, grid, s.box_A), s.positions_A, sp, dtype=np.float32
    )
    reach = POT.cutoff_A + SKIN_A
    kr, kc = mapping.window_needed(state, s.box_A, reach + 0.5)
    caps = tuple(int(c * caps_scale) for c in list_caps(state, s.box_A, reach, kr, kc))
    plan = EamPlan(kr, kc, tuple(s.box_A), "float32", SKIN_A, caps, active_per_block(state, wafer))
    spec = list_spec(wafer, POT, plan, 4096)
    atoms, geo = Atoms.of(wafer.place(state)), geometry(wafer)
    ids = _block_ids(wafer, geo)
    # the window regions `fabric.window_apply` hands its fn on this one device (periodic, no
    # padding): np.pad's wrap (hunt 77: window_apply refuses a fn returning the region, which
    # this test used to read them)
    assert wafer.padded_shape == grid

    def wrapped(a):
        a = np.asarray(a)
        return np.pad(a, ((kr, kr), (kc, kc)) + ((0, 0),) * (a.ndim - 2), mode="wrap")

    region, ids_region = wrapped(atoms.tagged_positions()), wrapped(ids)
    from wse_hpc.md.pe_build_numba import Block, March, Window

    held = np.asarray(atoms.species >= 0)
    planes = (np.ascontiguousarray(np.asarray(region)[..., i]) for i in range(4))
    window = Window(*planes, np.asarray(ids_region))
    cf = np.asarray(jnp.concatenate([spec.box, jnp.asarray([spec.reach2], jnp.float32)]))
    ci = np.asarray([kr, kc, spec.depth, spec.total, 1], np.int32)
    block = Block(held, np.ascontiguousarray(np.asarray(atoms.position)), np.asarray(ids))
    march = March(spec.offsets, np.asarray(spec.seg_caps, np.int32))
    return (window, block, march, cf, ci), spec.total


def _run(kernel, args, m):
    from wse_hpc.md.pe_build_numba import Built

    br, bc = args[1].held.shape
    out = Built(
        np.full((br, bc, m), -7, np.int32),
        np.full((br, bc, m), -7, np.int32),
        np.full((br, bc), -7, np.int32),
        np.zeros((br, bc), np.bool_),
    )
    kernel(*args, out)
    return out


@pytest.mark.parametrize(
    "cells, grid, caps_scale",
    [
        ((3, 3, 4), (13, 12), 1.0),  # 144 atoms on 156 PEs: empty PEs
        ((4, 4, 3), (15, 13), 1.0),  # another crystal and grid
        ((4, 4, 3), (15, 13), 0.6),  # capacities too small: overflow flags
    ],
)
def test_each_pair_once_gives_the_every_slot_build(cells, grid, caps_scale):
    from wse_hpc.md import pe_build_numba

    args, m = _inputs(cells, grid, caps_scale)
    want = _run(pe_build_numba.build, args, m)
    got = _run(pe_build_numba.build_pairs, args, m)
    for name, a, b in zip(("index", "species", "count", "over"), want, got, strict=True):
        np.testing.assert_array_equal(b, a, err_msg=name)
    assert want[2].sum() > 0
    assert bool(want[3].any()) == (caps_scale < 1.0)
