# %% [markdown]
# # EAM molecular dynamics, one atom per PE
#
# A jupytext script (`# %%` cells); the site build executes it (`docs/hooks.py`) at the small
# size below, `WSE_TUTORIAL_SIZE=full` runs a longer trajectory. Copper with the Zhou et al.
# 2004 EAM potential (generated, no file needed), one atom per emulated PE as in Santos et al.
# (SC24): a short NVE run, its forces checked against an all-pairs NumPy oracle, its energy
# checked for drift, and the wafer's predicted timesteps per second.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
from wse_core.cost.assumptions import assumed_spec
from wse_hpc.md import MdConfig, crystal, run_md, zhou04
from wse_hpc.md.reference import eam_reference
from wse_hpc.md.thermo import format_header, format_row

FULL = os.environ.get("WSE_TUTORIAL_SIZE") == "full"
steps = 400 if FULL else 40
pot = zhou04(["Cu"], knots=500)
cu = crystal("fcc", "Cu", pot.lattice_A[0], (4, 4, 4))  # 256 atoms, 14.5 A box
print(f"{cu.num_atoms} Cu atoms, box {cu.box_A.round(2)} A, cutoff {pot.cutoff_A:.2f} A")

# %% [markdown]
# `run_md` maps the atoms onto a grid of PEs, sizes each PE's neighbour window and lists,
# and runs velocity-Verlet steps in jitted chunks, printing LAMMPS-style thermo rows.

# %%
config = MdConfig(
    steps=steps, temperature_K=600.0, thermo_every=steps // 4, spec=assumed_spec("wse3")
)
print(format_header())
res = run_md(cu, pot, config, on_thermo=lambda r: print(format_row(r)))
print(f"{res.grid[0]} x {res.grid[1]} PEs, {res.list_builds} neighbour-list builds")

# %% [markdown]
# Two independent checks: the forces on the final positions against the NumPy all-pairs
# EAM (`wse_hpc.md.reference`, float64), and the total energy of the NVE run, which must
# stay put (float32 on the wafer).

# %%
final = res.structure
species = np.zeros(final.num_atoms, dtype=np.int64)
ref = eam_reference(pot, final.positions_A, species, final.box_A)
force_err = np.abs(final.forces_eV_A - ref.forces_eV_A).max()
scale = np.abs(ref.forces_eV_A).max()
e0, e1 = res.thermo[0].etotal, res.thermo[-1].etotal
print(f"max |F - F_ref| = {force_err:.2e} eV/A (largest force {scale:.2f} eV/A)")
print(f"total energy {e0:.4f} -> {e1:.4f} eV: drift {abs(e1 - e0) / cu.num_atoms:.1e} eV/atom")
assert force_err < 1e-3 * max(scale, 1.0)
assert abs(e1 - e0) / cu.num_atoms < 1e-3

# %%
fig, ax = plt.subplots(figsize=(6, 3.2), constrained_layout=True)
ax.plot([r.step for r in res.thermo], [r.temp for r in res.thermo], "o-")
ax.set(xlabel="step (1 fs)", ylabel="temperature (K)", title="NVE: kinetic to potential")

# %% [markdown]
# The prediction: the same plan priced on a WSE-3, by mechanism.

# %%
report = res.report
print(f"predicted {report.units_per_s:.3g} timesteps/s on {report.wafer} ({report.bound}-bound)")
report
