"""EAM molecular dynamics on the wafer, one atom per PE (Santos et al., SC24).

Modules: `potentials` (LAMMPS funcfl / setfl / fs files, LAMMPS's splines; `potential_format`:
the files' text layer), `zhou04` (potentials generated from Zhou, Johnson & Wadley 2004),
`lattice` (structures, crystals), `xyz` (extended XYZ), `mapping` (atoms -> PEs: the tile map),
`state` (`Atoms`, `Bath`, `MdState` pytrees), `eam` (the wafer kernel), `neighbours` (per-PE
candidate lists over the window: splines only within cutoff + skin; `neighbours.build`: the
build kernel and the lists' static `ListSpec`; `neighbour_plan` sizes them on the host),
`integrate` (`nve`, `nvt_langevin`, `nvt_nose_hoover` -> (init_fn, step_fn); Maxwell–Boltzmann;
`nose_hoover`: LAMMPS's Nosé–Hoover chain, tchain 3 by default), `thermo` (LAMMPS-style output),
`config` (`MdConfig`), `simulate` (the shell: `run_md` -> `MdResult`, whose `.report` is the
run's `RunReport`), `reference` (NumPy all-pairs oracle), `perf` (the wafer performance model,
by mechanism; `pe_program`: the PE's instructions and the rebuild cadence), `samples` (Santos et
al.'s 801,792-atom crystals and their plans), `experiments` (`santos24-md`), `lammps` (running
`lmp` for checks and benchmarks).
"""

import importlib
from typing import Any

# the function, not its module of the same name (a lazy name would be shadowed by the
# submodule once anything imports `wse_hpc.md.zhou04`); NumPy only
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

# name -> module, imported on first use (PEP 562): reading a structure or a potential file
# (`wse hpc md --structure`'s refusals) does not wait ~2 s for JAX (hunt 56)
_WHERE = {
    "MdConfig": "config", "Thermostat": "integrate", "maxwell_boltzmann": "integrate",
    "nve": "integrate", "nvt_langevin": "integrate", "nvt_nose_hoover": "integrate",
    "Structure": "lattice", "crystal": "lattice", "EamPotential": "potentials",
    "PotentialError": "potentials", "read_potential": "potentials",
    "write_setfl": "potentials", "MdResult": "simulate", "run_md": "simulate",
    "Atoms": "state", "MdState": "state", "read_xyz": "xyz", "write_xyz": "xyz",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"wse_hpc.md.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'wse_hpc.md' has no attribute {name!r}")
