"""Hunt 82 A and E: a LAMMPS `dump extxyz` read as LAMMPS wrote it, and a continued run's steps.

A. LAMMPS's `dump extxyz` (EXTRA-DUMP, dump_extxyz.cpp) writes `vel:R:3` in the run's units,
   A/ps under `units metal`; wse read the column as GPUMD's A/fs, 1000x: the 300 K frame was
   refused as 3e8 K, with the advice to give A/ps, which the file did. Now a frame whose
   comment line has LAMMPS's `Timestep=` key (GPUMD writes none) is read in A/ps, and one whose
   `Temperature=` disagrees with its velocities so read (another `units`) is refused.
E. A run continued from a frame restarted its Step column at 0 (a frame at step=400 gave rows
   0, 100, 200 where the run was steps 400-600). Now it counts on from the frame's step=
   (or LAMMPS's Timestep=), its thermo rows on the multiples of thermo_every plus its first
   and last steps, as LAMMPS's thermo output after read_restart; `first_step` (the CLI's
   --reset-timestep) is LAMMPS's reset_timestep.

Oracles: a frame written by LAMMPS itself (22 Jul 2025, update 4: 108 Cu atoms, Cu_u3.eam,
`velocity all create 300 4928459 mom yes dist gaussian`, `fix nve`, timestep 0.001, dumped at
step 100 with `dump_modify element Cu forces no`) and that run's own thermo rows at steps 100
and 150; LAMMPS's rule for thermo rows, counted by hand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.md import MdConfig, crystal, read_potential, run_md, zhou04
from wse_hpc.md.integrate import maxwell_boltzmann
from wse_hpc.md.testing import lammps_potential
from wse_hpc.md.units import kinetic
from wse_hpc.md.xyz import XyzError, read_frames, read_xyz, write_xyz

pytestmark = pytest.mark.timeout(900)

HEADER = (
    'Timestep=100 Time=0.100000 pbc="T T T" Lattice="10.845 0 0 0 10.845 0 0 0 10.845" '
    "Potential_energy=-380.0486149339213 Temperature=135.82242565449636 "
    "Properties=species:S:1:pos:R:3:vel:R:3"
)
ROWS = """\
Cu 0.133866 -0.0099492 -0.0246008 -1.31817 -1.976 0.10957
Cu 1.91522 1.87728 0.0566153 -1.29357 2.6183 0.603185
Cu 1.79819 -0.151217 1.86338 -0.602105 0.332641 -3.72916
Cu 0.0275809 1.82332 1.74919 1.43 -0.314925 1.26089
Cu 3.55042 -0.129279 0.078688 0.834659 -0.593176 -1.75913
Cu 5.35296 1.77199 0.0272546 -0.698689 -0.423515 2.25257
Cu 5.35388 -0.0936946 1.83668 0.17922 0.526156 2.01082
Cu 3.64715 1.84588 1.94323 -0.727745 -0.825822 1.36394
Cu 7.156 -0.0223187 0.0193709 -1.54269 0.835528 -2.53231
Cu 9.01244 1.69583 0.00639624 0.855851 -0.810897 -0.255955
Cu 9.06326 0.0170515 1.78437 0.521016 0.483162 -1.41725
Cu 7.13763 1.71991 1.84622 -0.722456 -1.35399 0.512944
Cu -0.00102533 3.5806 -0.00236742 0.419542 0.633747 0.736078
Cu 1.74424 5.36416 0.038141 -1.86278 -1.63304 -1.43331
Cu 1.77146 3.57218 1.7641 -0.18988 -0.119315 0.433201
Cu -0.101292 5.35742 1.76747 0.675536 0.598825 1.16193
Cu 3.64102 3.55876 0.021911 0.229313 1.37662 0.980138
Cu 5.50215 5.44686 0.0537055 -0.554925 0.210524 -1.82877
Cu 5.42412 3.59072 1.93015 -0.563521 -0.907167 -0.862898
Cu 3.68674 5.41285 1.83096 0.303214 0.70367 0.817221
Cu 7.1707 3.53021 -0.0182153 0.891891 0.414357 -0.279406
Cu 9.06796 5.39284 0.0182248 -0.232581 -2.32817 0.401108
Cu 9.0426 3.51473 1.75347 0.347757 0.359289 -1.85022
Cu 7.3055 5.45284 1.8594 -1.31442 0.909012 -1.42562
Cu 0.0233371 7.14647 0.0539044 -2.57012 1.83593 -1.66935
Cu 1.85206 8.94074 -0.020979 0.0368974 -0.0414747 1.92662
Cu 1.7795 7.18143 1.82814 -1.6443 0.437285 -1.97688
Cu -0.00660972 9.06548 1.73527 3.35192 0.587852 2.0989
Cu 3.65929 7.2115 0.00589541 -0.907335 -0.454355 -1.21365
Cu 5.35194 9.02645 0.00142103 1.78618 -0.216594 1.97168
Cu 5.47841 7.18018 1.80967 0.0329696 -1.92808 -2.24239
Cu 3.61133 8.91165 1.8826 1.34344 0.703617 -0.417889
Cu 7.20294 7.27999 -0.00232061 1.40761 0.730785 -0.97703
Cu 9.03194 9.09385 -0.0120249 1.05929 -1.68388 0.543549
Cu 9.02156 7.28871 1.77052 0.816423 0.716812 -2.19533
Cu 7.28971 9.14492 1.73226 0.652618 0.311443 0.0654428
Cu 0.00749492 0.0124065 3.59866 0.997406 -0.724138 -0.333127
Cu 1.80878 1.86102 3.60795 2.12703 1.92021 0.0669021
Cu 1.86551 0.0483102 5.37205 -1.76031 -0.891575 -3.0302
Cu 0.0474397 1.85035 5.38877 1.81021 -0.571907 0.458036
Cu 3.67153 -0.0986217 3.68823 -0.392734 1.20159 -0.435929
Cu 5.39926 1.75201 3.60176 0.877241 0.285366 -0.29589
Cu 5.48154 0.0506676 5.4224 0.75931 1.63447 -0.20158
Cu 3.63442 1.86492 5.27915 0.634318 -0.187887 -0.318417
Cu 7.17943 0.00405011 3.59673 -0.3914 -0.579867 2.24611
Cu 9.01871 1.83946 3.56588 -0.759227 0.73436 -1.84417
Cu 8.99898 -0.00130067 5.47356 1.65825 -0.706464 -1.06962
Cu 7.22726 1.77024 5.45208 -0.180181 -1.38401 0.601759
Cu -0.0220784 3.55439 3.56322 -1.51583 -1.50977 1.10647
Cu 1.73705 5.38045 3.59703 0.491612 -1.50905 -0.198215
Cu 1.75801 3.61593 5.32217 0.1145 1.19748 -0.759714
Cu -0.0540917 5.44484 5.37366 -0.655733 1.29788 -0.175354
Cu 3.56673 3.6936 3.62502 1.45548 -0.683064 0.671553
Cu 5.52456 5.48521 3.57131 1.35094 0.300287 -1.44974
Cu 5.50397 3.68618 5.39476 -2.14283 0.942685 1.07465
Cu 3.68086 5.43338 5.50904 1.14549 -0.254919 0.600115
Cu 7.28976 3.59431 3.58286 -0.458749 1.03946 0.520779
Cu 9.03183 5.51423 3.60251 -0.0291956 0.910383 -1.56189
Cu 8.9285 3.72947 5.43086 -0.617001 -1.60674 1.387
Cu 7.23261 5.52633 5.39608 1.81698 -5.11434 2.74255
Cu -0.124701 7.27094 3.58571 -0.784624 0.660486 0.624111
Cu 1.8256 8.99003 3.64116 0.0522478 0.166342 0.198949
Cu 1.85722 7.26707 5.37839 -0.261313 -0.258216 0.967719
Cu 0.0533072 9.17096 5.41063 -1.53783 -1.19677 3.59749
Cu 3.7022 7.10342 3.60602 -0.242617 1.60288 0.850841
Cu 5.47171 9.0655 3.6603 -0.740487 -0.115475 0.230477
Cu 5.44681 7.19139 5.5978 -0.435103 -0.269576 -0.170653
Cu 3.56404 8.9511 5.388 -4.0287 3.15414 1.57313
Cu 7.33135 7.33033 3.63081 -0.509 -1.47154 0.867833
Cu 9.06184 9.15094 3.6484 -1.28295 -0.379661 -2.50935
Cu 9.04903 7.32075 5.41021 1.48265 0.584529 -0.186766
Cu 7.19491 9.08268 5.52585 -0.612982 -0.197242 -0.147625
Cu -0.0146726 0.0352319 7.21863 1.18951 0.742361 -1.01168
Cu 1.76914 1.85329 7.15227 -0.460042 0.480784 -1.20596
Cu 1.85327 -0.00621713 8.9906 -1.24082 -1.43886 -0.214914
Cu 0.0541646 1.79416 8.97674 -0.598075 -1.00566 0.96953
Cu 3.6468 0.00829774 7.12176 0.833743 0.983643 -1.5665
Cu 5.44023 1.79845 7.10097 2.22382 0.201976 -0.582061
Cu 5.34829 -0.00269587 9.07738 -1.77484 -1.41044 0.19456
Cu 3.58657 1.82267 9.06173 -0.643485 0.756352 1.16679
Cu 7.26102 0.0285489 7.21329 -1.65132 0.721148 -0.0163744
Cu 9.0697 1.85426 7.21571 -2.1039 -0.872779 0.991547
Cu 9.12172 0.0540937 9.02959 -0.183143 0.612144 -2.14156
Cu 7.20795 1.77743 9.04821 -1.29227 2.39038 2.21021
Cu -0.0218952 3.68593 7.1647 -0.365634 0.405105 1.31945
Cu 1.81679 5.3991 7.14749 -1.41249 -1.05873 0.731159
Cu 1.89741 3.64269 9.02274 0.830712 0.851843 -0.844629
Cu -0.10443 5.34404 8.9355 -0.976296 1.28016 0.487499
Cu 3.59407 3.70632 7.16233 0.103065 1.0489 1.14224
Cu 5.42736 5.32202 7.28219 -0.0257438 1.74138 -0.983181
Cu 5.38629 3.6136 9.09323 2.05916 -0.826128 0.0898041
Cu 3.59395 5.41506 9.06002 2.18057 -1.35479 -1.32824
Cu 7.20358 3.55941 7.26522 -0.23355 2.19905 -0.527023
Cu 8.96163 5.44027 7.23159 1.78573 -0.12341 -0.192321
Cu 8.97681 3.49693 9.06575 1.5996 2.87803 -0.774426
Cu 7.24456 5.3671 9.15268 -3.05148 0.0966008 -0.971429
Cu -0.0183753 7.3018 7.08366 -0.0703701 -0.0612109 3.8196
Cu 1.8094 9.03891 7.19286 0.622095 -2.34974 -0.828609
Cu 1.62347 7.19873 8.9617 0.752518 0.795171 0.468456
Cu 0.080464 9.07678 9.02894 0.473428 0.55297 -0.331611
Cu 3.54615 7.25383 7.28826 0.693182 -1.4407 -1.78838
Cu 5.46187 9.13314 7.2766 0.915363 -2.38655 0.96692
Cu 5.36898 7.13027 9.08701 -1.11509 -1.3338 2.54422
Cu 3.56401 9.0951 9.0837 -2.83345 -1.88706 0.0817108
Cu 7.23969 7.27487 7.35858 2.54466 1.47698 0.601162
Cu 9.05788 9.03077 7.27605 1.1294 0.65721 1.1468
Cu 9.13997 7.28737 9.05308 -0.546379 -2.2886 -1.4654
Cu 7.1816 9.09615 9.05712 2.77691 1.2308 0.961181
"""
LAMMPS_FRAME = f"108\n{HEADER}\n{ROWS}"
# that run's thermo (`thermo_style custom step pe ke etotal temp press`) at steps 100 and 150
LAMMPS_ROWS = {
    100: (-380.04861493, 1.87853763, -378.17007731, 135.82242565, 10584.84204197),
    150: (-380.56318880, 2.39283000, -378.17035880, 173.00690191, 8605.57446728),
}
CU_MASS = 63.55  # the run's: pair_coeff with the funcfl Cu_u3.eam sets its 63.55 amu


def _write(tmp_path, text: str, name: str = "dump.xyz"):
    path = tmp_path / name
    path.write_text(text)
    return path


# -- A: the unit ----------------------------------------------------------------------------
def test_lammps_dump_velocities_are_read_in_a_per_ps(tmp_path):
    """The frame's velocities give LAMMPS's own Temperature= (3N - 3 degrees of freedom, the
    dump's 6 digits: 1e-5); its step is its Timestep=. The same columns without Timestep=
    (GPUMD's layout) are still read in A/fs, 1000x."""
    frame = read_frames(_write(tmp_path, LAMMPS_FRAME))[-1]
    s = frame.structure
    assert frame.lammps_dump and s.step == 100
    temp = kinetic(np.full(s.num_atoms, CU_MASS), s.velocities_A_ps)[1]
    assert temp == pytest.approx(LAMMPS_ROWS[100][3], rel=1e-5)
    gpumd = LAMMPS_FRAME.replace("Timestep=100 ", "")
    other = read_frames(_write(tmp_path, gpumd, "gpumd.xyz"))[-1]
    assert not other.lammps_dump and other.structure.step is None
    np.testing.assert_allclose(other.structure.velocities_A_ps, 1000.0 * s.velocities_A_ps)


def test_lammps_dump_of_other_units_is_refused(tmp_path):
    """`units real` writes A/fs: the velocities read in A/ps give 1e-6 x Temperature=."""
    rows = []
    for line in ROWS.splitlines():
        f = line.split()
        rows.append(" ".join([*f[:4], *(f"{float(v) / 1000.0:g}" for v in f[4:])]))
    text = f"108\n{HEADER}\n" + "\n".join(rows) + "\n"
    said = r"Temperature=135\.8.* K disagrees with its vel:R:3 read in A/ps, LAMMPS units metal"
    with pytest.raises(XyzError, match=said + r" \(0\.0001358 K\).*units real"):
        read_xyz(_write(tmp_path, text))


@pytest.mark.skipif(lammps_potential("Cu_u3.eam") is None, reason="needs LAMMPS's Cu_u3.eam")
def test_a_lammps_dump_continues_as_lammps_ran_on(tmp_path):
    """wse continues LAMMPS's frame 50 steps (fp64): its rows are LAMMPS's steps 100 and 150,
    with LAMMPS's values. Step 100: the frame itself, within the dump's 6 digits (velocities
    5e-6 relative: Temp 1e-5; positions 5e-6 A: PotEng 1e-6 relative, 4e-5 eV measured). Step
    150: the dump's rounding carried 50 steps, measured 1.3e-5 of Temp and 1e-7 of TotEng, so
    1e-4 and 1e-6."""
    pot = read_potential(lammps_potential("Cu_u3.eam"))
    s = read_xyz(_write(tmp_path, LAMMPS_FRAME))[-1]
    cfg = MdConfig(steps=50, thermo_every=50, dtype="float64", spec=PRESETS["small"])
    rows = {r.step: r for r in run_md(s, pot, cfg).thermo}
    assert sorted(rows) == [100, 150]
    pe, _, _, temp, _ = LAMMPS_ROWS[100]
    assert rows[100].temp == pytest.approx(temp, rel=1e-5)
    assert rows[100].pe == pytest.approx(pe, rel=1e-6)
    _, _, etotal, temp, _ = LAMMPS_ROWS[150]
    assert rows[150].temp == pytest.approx(temp, rel=1e-4)
    assert rows[150].etotal == pytest.approx(etotal, rel=1e-6)


# -- E: the step count ----------------------------------------------------------------------


def test_a_continued_run_counts_on_from_its_frame(tmp_path):
    """30 steps from rest-drawn velocities (rows 0-30, every 10), its last frame written and
    read back (step=30), then: 25 more steps give LAMMPS's rows 30, 40, 50, 55 (the multiples
    of 10 and the last step); first_step=0 (reset_timestep 0) rows 0, 10, 20, 25 with the same
    values 10 steps in; a frame at step 25, 20 steps: rows 25, 30, 40, 45 (hand counts)."""
    pot, runners = zhou04(["Cu"], knots=500), {}
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    s.velocities_A_ps = maxwell_boltzmann(np.full(s.num_atoms, 63.546), 300.0, 1)
    cfg = MdConfig(steps=30, thermo_every=10, spec=PRESETS["small"])
    first = run_md(s, pot, cfg, runners=runners)
    assert [r.step for r in first.thermo] == [0, 10, 20, 30] and first.structure.step == 30
    back = read_xyz(write_xyz(tmp_path / "t.xyz", [first.structure]))[-1]
    assert back.step == 30
    on = run_md(back, pot, dataclasses.replace(cfg, steps=25), runners=runners)
    assert [r.step for r in on.thermo] == [30, 40, 50, 55] and on.structure.step == 55
    reset = run_md(back, pot, dataclasses.replace(cfg, steps=25, first_step=0), runners=runners)
    assert [r.step for r in reset.thermo] == [0, 10, 20, 25]
    assert reset.thermo[1].etotal == on.thermo[1].etotal  # a label: the same steps ran
    back.step = 25
    odd = run_md(back, pot, dataclasses.replace(cfg, steps=20), runners=runners)
    assert [r.step for r in odd.thermo] == [25, 30, 40, 45]
