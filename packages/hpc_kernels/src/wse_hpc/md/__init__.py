"""EAM molecular dynamics on the wafer, one atom per PE (Santos et al., SC24).

Modules: `potentials` (LAMMPS funcfl / setfl / fs files, LAMMPS's splines;
`potential_format`: the files' text layer), `zhou04` (potentials generated from Zhou,
Johnson & Wadley 2004), `lattice` (structures, crystals), `xyz` (extended XYZ), `mapping`
(atoms -> PEs: the tile map), `state` (`Atoms`, `Bath`, `MdState` pytrees), `eam` (the wafer
kernel), `neighbours` (per-PE candidate lists over the window: splines only within cutoff + skin;
`neighbours.build`: the build kernel and the lists' static `ListSpec`; `neighbour_plan` sizes them
on the host), `integrate` (`nve`, `nvt_langevin`, `nvt_nose_hoover` -> (init_fn, step_fn);
Maxwell–Boltzmann), `thermo` (LAMMPS-style output), `config` (`MdConfig`), `simulate` (the
shell: `run_md` -> `MdResult`, whose `.report` is the run's `RunReport`), `reference`
(NumPy all-pairs oracle), `perf` (the wafer performance model, by mechanism; `pe_program`:
the PE's instructions and the rebuild cadence), `samples` (Santos et al.'s 801,792-atom
crystals and their plans), `experiments` (`santos24-md`), `lammps` (running `lmp` for checks
and benchmarks).
"""

from wse_hpc.md.config import MdConfig
from wse_hpc.md.integrate import Thermostat, maxwell_boltzmann, nve, nvt_langevin, nvt_nose_hoover
from wse_hpc.md.lattice import Structure, crystal
from wse_hpc.md.potentials import EamPotential, PotentialError, read_potential, write_setfl
from wse_hpc.md.simulate import MdResult, run_md
from wse_hpc.md.state import Atoms, MdState
from wse_hpc.md.xyz import read_xyz, write_xyz
from wse_hpc.md.zhou04 import zhou04

__all__ = [
    "Atoms",
    "EamPotential",
    "MdConfig",
    "MdResult",
    "MdState",
    "PotentialError",
    "Structure",
    "Thermostat",
    "crystal",
    "maxwell_boltzmann",
    "nve",
    "nvt_langevin",
    "nvt_nose_hoover",
    "read_potential",
    "read_xyz",
    "run_md",
    "write_setfl",
    "write_xyz",
    "zhou04",
]
