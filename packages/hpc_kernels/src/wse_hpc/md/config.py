"""An MD run's settings: `MdConfig`, what `simulate.run_md` runs and `perf` prices.

Contract: a frozen keyword-only dataclass of plain settings (steps, timestep, thermostat,
wafer spec, grid, tile, list skin and cadence); it checks nothing (`run_md` validates it
against the structure) and imports only the thermostat's type, so that the shell, the
planner (`neighbour_plan.plan_window`) and the performance model all read one definition.
"""

from __future__ import annotations

import dataclasses

from wse_core import WaferSpec

from wse_hpc.md.integrate import Thermostat

__all__ = ["MdConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MdConfig:
    steps: int = 0
    dt_fs: float = 1.0
    thermostat: Thermostat = Thermostat()
    # set: new Maxwell–Boltzmann velocities drawn at it with `seed`, zero total momentum,
    # replacing the structure's (LAMMPS `velocity all create T seed mom yes dist gaussian`);
    # None: the structure's own velocities (zero when it has none), and a Nosé–Hoover
    # bath it carries (`run_setup.start_bath`). The thermostat's target is its own.
    temperature_K: float | None = None
    thermo_every: int = 100
    seed: int = 0
    dtype: str = "float32"
    spec: WaferSpec  # the wafer the run emulates and is priced on (required: no default wafer)
    defect_seed: int | None = None
    mesh_shape: tuple[int, int] | None = None
    # neighbour-list skin (LAMMPS `neighbor 1.0 bin` in metal units); 0 rebuilds every step
    skin_A: float = 1.0
    grid: tuple[int, int] | None = None  # PE rows, cols (default: `mapping.choose_grid`)
    tile: tuple[int, int] | None = None  # the map's tile (default: `mapping.choose_tile`)
    # steps per neighbour-list rebuild at the start (then adapted); None: the steps the
    # fastest atom at the start takes to cross skin / 2 (`initial_every`)
    rebuild_every: int | None = None
    # the step the run starts at: its rows and frames are numbered from it, and its thermo
    # rows fall on the multiples of thermo_every (and its first and last step), as LAMMPS's
    # Step after read_restart; None: the structure's (`Structure.step`: a frame's step= or
    # Timestep=), 0 without one; an int: LAMMPS's `reset_timestep N` (hunt 82)
    first_step: int | None = None
