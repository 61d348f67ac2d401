"""LAMMPS-style thermodynamic output from gathered per-atom data (host side, float64).

`thermo_row(step, masses, velocities, energies, virials, volume)` gives the columns of
`thermo_style custom step pe ke etotal temp press` with LAMMPS's definitions: temp with
3N - 3 degrees of freedom, press = (2 ke + virial) / (3 V) in bar; `ecouple` is the
thermostat's energy (Nosé–Hoover, else 0) and `econserve` = etotal + ecouple, as LAMMPS's
thermo keywords of the same names. `format_rows` prints them
as LAMMPS does; `performance_line` is LAMMPS's closing `Performance:` line. `state_row` and
`state_structure` read a run's placed `MdState` into a row and a `Structure` (wrapped
positions with their image flags, hunt 76: without them a trajectory gave no displacement).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from wse_hpc.md import mapping
from wse_hpc.md.lattice import Structure
from wse_hpc.md.state import MdState
from wse_hpc.md.units import NKTV2P, kinetic

__all__ = [
    "ThermoRow",
    "kinetic",
    "thermo_row",
    "format_header",
    "format_row",
    "performance_line",
    "state_row",
    "state_structure",
]

COLUMNS = ("step", "pe", "ke", "etotal", "temp", "press")


@dataclasses.dataclass(frozen=True)
class ThermoRow:
    step: int
    pe: float  # eV
    ke: float  # eV
    etotal: float  # eV
    temp: float  # K
    press: float  # bar
    ecouple: float = 0.0  # eV, the thermostat's energy (Nosé–Hoover)

    @property
    def econserve(self) -> float:
        return self.etotal + self.ecouple

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def thermo_row(
    step: int,
    masses_amu: np.ndarray,
    velocities_A_ps: np.ndarray,
    energies_eV: np.ndarray,
    virial_eV: float,
    volume_A3: float,
    ecouple_eV: float = 0.0,
) -> ThermoRow:
    ke, temp = kinetic(masses_amu, velocities_A_ps)
    pe = float(np.asarray(energies_eV, dtype=np.float64).sum())
    press = (2.0 * ke + float(virial_eV)) / (3.0 * volume_A3) * NKTV2P
    return ThermoRow(int(step), pe, ke, pe + ke, temp, press, float(ecouple_eV))


def format_header(bath: bool = False) -> str:
    """LAMMPS's column names; with `bath` (a Nosé–Hoover run) also `Ecouple` and `Econserve`,
    as `thermo_style custom ... ecouple econserve` prints them."""
    head = f"{'Step':>10} {'PotEng':>16} {'KinEng':>14} {'TotEng':>16} {'Temp':>12} {'Press':>14}"
    return head + (f" {'Ecouple':>14} {'Econserve':>16}" if bath else "")


def format_row(r: ThermoRow, bath: bool = False) -> str:
    row = (
        f"{r.step:>10d} {r.pe:>16.8f} {r.ke:>14.8f} {r.etotal:>16.8f} {r.temp:>12.5f} "
        f"{r.press:>14.5f}"
    )
    return row + (f" {r.ecouple:>14.8f} {r.econserve:>16.8f}" if bath else "")


def performance_line(steps: int, wall_s: float, n_atoms: int, dt_fs: float) -> str:
    """LAMMPS's `Performance: X ns/day, Y hours/ns, Z timesteps/s, W katom-step/s`."""
    if steps <= 0 or wall_s <= 0:
        return "Performance: no timesteps run"
    tps = steps / wall_s
    ns_day = tps * dt_fs * 1e-6 * 86400.0
    return (
        f"Performance: {ns_day:.3f} ns/day, {24.0 / ns_day:.3f} hours/ns, "
        f"{tps:.3f} timesteps/s, {tps * n_atoms / 1e3:.3f} katom-step/s"
    )


def state_row(step, wafer, state: MdState, masses, volume, ecouple: float = 0.0) -> ThermoRow:
    """The thermo row of a run's placed state (`MdState` on `wafer`)."""
    sp = wafer.gather(state.atoms.species)
    held = sp >= 0
    energies = wafer.gather(state.eam.energy)[held]
    virial = float(np.asarray(wafer.gather(state.eam.virial), dtype=np.float64)[held].sum())
    vel = wafer.gather(state.atoms.velocity)[held]
    return thermo_row(step, masses[sp[held]], vel, energies, virial, volume, ecouple)


def state_structure(wafer, state: MdState, pot, n: int, box, images=None) -> Structure:
    """The n atoms of a placed state as a `Structure`: positions wrapped into the box, with
    their image flags (LAMMPS's ix iy iz), so that positions + images * box is the state's
    unwrapped position (which the kernels keep) plus `images` (n, 3) int64 whole boxes
    (None: none), the run's own count of what its re-maps shifted (`simulate`)."""
    st, out = wafer.gather(state.atoms.record()), state.eam
    u = mapping.unpack(st, n)
    energies = wafer.gather(out.energy).reshape(-1)[u["pe_flat_index"]]
    box = np.asarray(box, dtype=np.float64)
    wrapped = np.mod(u["positions_A"], box)
    crossed = np.rint((u["positions_A"] - wrapped) / box).astype(np.int64)
    return Structure(
        symbols=np.array([pot.elements[s] for s in u["species"]]),
        positions_A=wrapped,
        box_A=box.copy(),
        velocities_A_ps=u["velocities_A_ps"],
        forces_eV_A=np.asarray(
            wafer.gather(out.forces).reshape(-1, 3)[u["pe_flat_index"]], dtype=np.float64
        ),
        energies_eV=np.asarray(energies, dtype=np.float64),
        images=crossed if images is None else crossed + images,
    )
