"""Integrators and the shell: Maxwell–Boltzmann velocities, NVE energy conservation,
Langevin temperature, extended XYZ round trips, and the errors users can cause."""

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_core.errors import WseError
from wse_hpc.md.config import MdConfig
from wse_hpc.md.integrate import BOLTZ_EV_K, MVV2E, Thermostat, maxwell_boltzmann
from wse_hpc.md.lammps import lammps_available, lammps_eval, lammps_nve
from wse_hpc.md.lattice import crystal
from wse_hpc.md.potentials import write_setfl
from wse_hpc.md.simulate import run_md
from wse_hpc.md.testing import perturbed
from wse_hpc.md.xyz import read_xyz, write_xyz
from wse_hpc.md.zhou04 import zhou04

POT = zhou04(["Cu"], knots=500)


def test_maxwell_boltzmann_has_zero_momentum_and_exact_temperature():
    m = np.where(np.arange(500) % 2, 63.546, 58.69)
    v = maxwell_boltzmann(m, 300.0, seed=4)
    np.testing.assert_allclose((m[:, None] * v).sum(0), 0.0, atol=1e-9)
    t = (m[:, None] * v * v).sum() * MVV2E / ((3 * 500 - 3) * BOLTZ_EV_K)
    assert t == pytest.approx(300.0, rel=1e-12)
    assert not np.allclose(v, maxwell_boltzmann(m, 300.0, seed=5))


def test_extended_xyz_round_trip_and_ase_reads_it(tmp_path):
    import ase.io

    s = perturbed("fcc", "Cu", 3.6, (2, 2, 2), 0.05, seed=1)
    rng = np.random.default_rng(0)
    s.velocities_A_ps = rng.normal(size=(s.num_atoms, 3))
    s.forces_eV_A = rng.normal(size=(s.num_atoms, 3))
    s.energies_eV = rng.normal(size=s.num_atoms)
    path = write_xyz(tmp_path / "t.xyz", [s, s])
    frames = read_xyz(path)
    assert len(frames) == 2
    for name in ("positions_A", "velocities_A_ps", "forces_eV_A", "energies_eV", "box_A"):
        np.testing.assert_allclose(getattr(frames[1], name), getattr(s, name), rtol=1e-9)
    atoms = ase.io.read(path, index=0)
    np.testing.assert_allclose(atoms.get_forces(), s.forces_eV_A, rtol=1e-9)
    assert atoms.get_potential_energy() == pytest.approx(s.energies_eV.sum(), rel=1e-9)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.positions_A.__setitem__((3, 0), 1e7), "outside the box"),  # past MAX_BOX_A
        (lambda s: s.positions_A.__setitem__(1, s.positions_A[0] + 0.1), "overlap"),
        (lambda s: s.symbols.__setitem__(2, "Zr"), "no parameters for Zr"),
    ],
)
def test_bad_structures_are_clear_errors(change, message):
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    change(s)
    with pytest.raises(WseError, match=message):
        run_md(s, POT, MdConfig(steps=0, spec=preset("wse3")))


def test_non_positive_timestep_is_an_error():
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    with pytest.raises(WseError, match="timestep must be positive"):
        run_md(s, POT, MdConfig(steps=1, dt_fs=0.0, spec=preset("wse3")))
    with pytest.raises(WseError, match="unknown thermostat"):
        Thermostat("berendsen")


@pytest.mark.cpu_devices
@pytest.mark.slow
def test_nve_conserves_energy_and_output_round_trips(tmp_path):
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.05, seed=2)
    with jax.enable_x64(True):
        res = run_md(
            s,
            POT,
            MdConfig(
                steps=200,
                temperature_K=600.0,
                thermo_every=50,
                dtype="float64",
                mesh_shape=(2, 4),
                spec=preset("wse3"),
            ),
        )
    e = np.array([r.etotal for r in res.thermo])
    # 1 fs velocity Verlet on Cu at ~300 K: total energy fluctuates ~1e-5 eV/atom, no drift
    assert np.abs(e - e[0]).max() / s.num_atoms < 5e-5
    assert res.thermo[0].temp == pytest.approx(600.0, rel=1e-9)
    write_xyz(tmp_path / "out.xyz", [res.structure])
    back = read_xyz(tmp_path / "out.xyz")[0]
    np.testing.assert_allclose(back.forces_eV_A, res.structure.forces_eV_A, atol=1e-8)


@pytest.mark.cpu_devices
@pytest.mark.slow
def test_langevin_brings_the_temperature_to_the_target():
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    cfg = MdConfig(
        steps=600,
        thermostat=Thermostat("langevin", 500.0, 50.0),
        thermo_every=100,
        mesh_shape=(1, 2),
        spec=preset("wse3"),
    )
    res = run_md(s, POT, cfg)
    temps = [r.temp for r in res.thermo[-3:]]
    # equipartition: a 256-atom sample fluctuates by ~T sqrt(2 / 3N) ~ 5 %
    assert np.mean(temps) == pytest.approx(500.0, rel=0.2)


@pytest.mark.cpu_devices
@pytest.mark.slow
@pytest.mark.skipif(not lammps_available(), reason="needs lmp (apt-get install lammps)")
def test_nve_drift_no_worse_than_lammps_and_same_trajectory(tmp_path):
    path = write_setfl(POT, tmp_path / "Cu.eam.alloy")
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    s.velocities_A_ps = maxwell_boltzmann([POT.masses_amu[0]] * s.num_atoms, 600.0, seed=3)
    with jax.enable_x64(True):
        ours = run_md(
            s,
            POT,
            MdConfig(
                steps=1000,
                thermo_every=100,
                dtype="float64",
                mesh_shape=(1, 2),
                spec=preset("wse3"),
            ),
        )
    ref = lammps_nve(s, POT, [path], ["Cu"], steps=1000, thermo_every=100)
    e_ours = np.array([r.etotal for r in ours.thermo])
    e_lmp = np.array([row[3] for row in ref["thermo"]])
    drift_ours = np.abs(e_ours - e_ours[0]).max() / s.num_atoms
    drift_lmp = np.abs(e_lmp - e_lmp[0]).max() / s.num_atoms
    assert drift_ours <= 1.5 * drift_lmp + 1e-7  # same integrator: same size of fluctuation
    # the first 100 steps follow LAMMPS's trajectory (chaos separates them later)
    assert ours.thermo[1].pe == pytest.approx(ref["thermo"][1][1], rel=1e-6)
    assert ours.thermo[0].press == pytest.approx(ref["thermo"][0][5], rel=1e-6)


def _hot_crystal(temperature_K: float):
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    s.velocities_A_ps = maxwell_boltzmann([POT.masses_amu[0]] * s.num_atoms, temperature_K, seed=3)
    return s


@pytest.mark.cpu_devices
@pytest.mark.slow
def test_nose_hoover_conserves_the_extended_energy_as_nve_conserves_etotal():
    s = _hot_crystal(1000.0)
    runs = {}
    with jax.enable_x64(True):
        for kind in ("nose-hoover", "none"):
            cfg = MdConfig(
                steps=1000,
                thermostat=Thermostat(kind, 500.0, 100.0),
                thermo_every=50,
                dtype="float64",
                mesh_shape=(1, 2),
                spec=preset("wse3"),
            )
            runs[kind] = run_md(s, POT, cfg).thermo
    nh, nve = runs["nose-hoover"], runs["none"]
    drift = lambda rows: max(abs(r.econserve - rows[0].econserve) for r in rows) / s.num_atoms  # noqa: E731
    # etotal + ecouple is the conserved quantity of the Nose-Hoover equations; the Trotter split
    # is second order like velocity Verlet, so its error is the same size as NVE's
    assert drift(nh) <= 2.0 * drift(nve)
    # not vacuous: the bath exchanged far more energy than that error
    assert abs(nh[-1].ecouple) / s.num_atoms > 50 * drift(nh)
    assert all(r.ecouple == 0.0 for r in nve)


@pytest.mark.cpu_devices
@pytest.mark.slow
def test_nose_hoover_time_averaged_temperature_is_the_target():
    # from 1000 K (NVE would settle near 500 K) to a 300 K target, Tdamp 50 fs
    s = _hot_crystal(1000.0)
    cfg = MdConfig(
        steps=4000,
        thermostat=Thermostat("nose-hoover", 300.0, 50.0),
        thermo_every=10,
        mesh_shape=(1, 2),
        spec=preset("wse3"),
    )
    temps = np.array([r.temp for r in run_md(s, POT, cfg).thermo])
    # canonical: <T> = T0 with Nf = 3N - 3 (the thermostat's and the thermo's dof), and the
    # instantaneous T fluctuates by T0 sqrt(2 / Nf) ~ 5 %; the last 2 ps hold ~9 periods of
    # the bath (2 pi Tdamp / sqrt 2 ~ 0.22 ps), so their mean is good to ~2 %: allow 4 %
    assert np.mean(temps[len(temps) // 2 :]) == pytest.approx(300.0, rel=0.04)
    assert temps[0] == pytest.approx(1000.0)  # it started far from the target


def test_nose_hoover_needs_a_positive_target():
    with pytest.raises(WseError, match="nose-hoover needs"):
        Thermostat("nose-hoover", 0.0, 100.0)


@pytest.mark.slow
def test_full_window_fallback_and_neighbour_lists_agree(monkeypatch):
    import wse_hpc.md.neighbour_plan as neighbour_plan

    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.05, seed=5)
    cfg = MdConfig(
        steps=30, temperature_K=900.0, thermo_every=30, dtype="float64", spec=preset("wse3")
    )
    with jax.enable_x64(True):
        lists = run_md(s, POT, cfg)
        monkeypatch.setattr(neighbour_plan, "LIST_BUDGET_BYTES", 0)  # as for 800k atoms
        full = run_md(s, POT, cfg)
    assert lists.plan.caps and not full.plan.caps
    np.testing.assert_allclose(full.structure.forces_eV_A, lists.structure.forces_eV_A, atol=1e-9)
    assert full.thermo[-1].etotal == pytest.approx(lists.thermo[-1].etotal, abs=1e-8)


@pytest.mark.slow
@pytest.mark.skipif(not lammps_available(), reason="needs lmp (apt-get install lammps)")
@pytest.mark.parametrize(
    "cells, grid, tile",
    [
        ((10, 10, 10), None, None),  # 4,000 atoms, the tile choose_tile finds
        ((20, 20, 20), None, None),  # 32,000 atoms
        ((12, 10, 4), (40, 48), (2, 2)),  # a slab laid site by site, no empty PE
    ],
)
def test_the_tile_map_gives_lammps_forces_and_energies(tmp_path, cells, grid, tile):
    """The emulator on the tile map (fp64, lists over the window the map needs) against
    LAMMPS's `run 0` on the same setfl file: per-atom energies and forces, atom by atom."""
    path = write_setfl(POT, tmp_path / "Cu.eam.alloy")
    s = perturbed("fcc", "Cu", 3.615, cells, 0.1, seed=3)
    with jax.enable_x64(True):
        res = run_md(
            s, POT, MdConfig(steps=0, dtype="float64", grid=grid, tile=tile, spec=preset("wse3"))
        )
    ref = lammps_eval(s, POT, [path], ["Cu"])
    assert res.plan.caps and (tile is None or res.tile == tile)
    # the kernel is within 1e-11 of the NumPy reference, the reference within 1e-9 eV/A and
    # 1e-10 eV of LAMMPS (test_md_potentials)
    np.testing.assert_allclose(res.structure.forces_eV_A, ref["forces"], atol=1e-9)
    np.testing.assert_allclose(res.structure.energies_eV, ref["energies"], atol=1e-10)


def test_a_hot_start_from_the_sites_replans_once_with_the_counts_it_measured():
    """Cu fcc from its sites at 1600 K (2,048 atoms, 100 steps in one chunk): the sites
    count 86 atoms within cutoff + skin, the hot crystal ~115 twenty steps on (the shell at
    6.76 A comes in). The first re-plan sizes the lists from the state that overflowed, so
    the run re-plans once, and M holds the counts without the third re-plan's headroom
    (before: a re-plan for the window planned M from the sites again, 97, and overflowed
    again; three re-plans, M 226)."""
    from wse_hpc.md.neighbour_plan import TOTAL_HEADROOM, reach_pairs

    s = crystal("fcc", "Cu", 3.615, (8, 8, 8))
    s.velocities_A_ps = maxwell_boltzmann([POT.masses_amu[0]] * s.num_atoms, 1600.0, seed=1)
    res = run_md(s, POT, MdConfig(steps=100, thermo_every=100, spec=preset("wse3")))
    assert res.replans <= 1 and res.steps == 100
    end = res.structure
    in_reach = np.bincount(
        reach_pairs(end.positions_A, end.box_A, POT.cutoff_A + res.plan.skin_A).ravel(),
        minlength=s.num_atoms,
    ).max()
    # M: the headroom over the counts, a fifth more for those of the end against the measured
    # state's (the third re-plan's headroom is 1.5 more)
    assert in_reach < res.plan.caps[-1] <= int(np.ceil(1.2 * TOTAL_HEADROOM * in_reach)) + 2


def test_a_replan_that_would_overflow_sram_falls_back_to_less_headroom(monkeypatch):
    """A re-plan first asks for a wider window with more list headroom; where the wafer's
    SRAM refuses that, it takes the plan with this state's own counts (issue 34's 32,000-atom
    crash). Forced here: the first plan's lists are starved (an overflow, so a re-plan) and
    SRAM refuses the first re-plan's try; the run ends as the unforced one does."""
    import wse_hpc.md.neighbour_plan as nplan
    import wse_hpc.md.segments as segments
    import wse_hpc.md.simulate as sim
    from wse_core.errors import SramBudgetError

    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.05, seed=2)
    cfg = MdConfig(steps=4, thermo_every=2, temperature_K=300.0, spec=preset("wse3"))
    ref = run_md(s, POT, cfg)
    caps, sram, calls = nplan.list_caps, sim.sram_plan, {"caps": 0, "sram": 0}

    def starved(*args, **kw):  # the first plan's lists hold 3 candidates: an overflow
        out = caps(*args, **kw)
        calls["caps"] += 1
        return tuple(min(c, 3) for c in out) if calls["caps"] == 1 else out

    def tight(wafer, pot, plan):  # the re-plan's first try (wider, more headroom) is refused
        calls["sram"] += 1
        if calls["sram"] == 2:
            raise SramBudgetError("refused by the test")
        return sram(wafer, pot, plan)

    monkeypatch.setattr(nplan, "list_caps", starved)
    monkeypatch.setattr(sim, "sram_plan", tight)  # the first plan's
    monkeypatch.setattr(segments, "sram_plan", tight)  # the re-plan's (`segments.replan`)
    got = run_md(s, POT, cfg)
    assert got.replans >= 1 and calls["sram"] >= 3
    np.testing.assert_allclose(
        [r.etotal for r in got.thermo], [r.etotal for r in ref.thermo], rtol=1e-6
    )  # fp32: another window and list order sum the same pairs in another order
