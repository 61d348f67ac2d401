"""Hostile inputs of hunt 57 that a named limit now refuses, each in one line naming the input
and what is allowed, before the work: an --assume value past the constant's `limits`
(fp32_mul_width=1e30 was priced), an .npz member that inflates ~1,000x (a 256 MiB array of
zeros in a 250 KiB file was read whole), and extended XYZ files past the limits xyz_bytes
or xyz_atoms (read whole, then split into per-line strings, ~13x the file in memory)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line, zip_bomb_npz

ROOT = typer.main.get_command(app)


def _refused(args: list, message: str, env: dict[str, str] | None = None) -> str:
    return refused_in_one_line(ROOT, [str(a) for a in args], message, env)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("fp32_mul_width=1e30", "fp32_mul_width must be in [0.125, 64] elements/cycle, got '1e30'"),
        ("fp32_mul_width=1e-30", "[0.125, 64] elements/cycle"),
        ("sram_read_bytes_per_cycle=1e300", "[0.125, 1024] B/cycle per PE"),
        ("clock_hz=1e30", "clock_hz must be in [1e+06, 1e+11] Hz"),
        ("swarmx_fanout=1e9", "swarmx_fanout must be in [2, 1024]"),
        ("table_ii_block_z=1e12", "table_ii_block_z must be in [1, 1000] cells"),
        ("overlap=7", "overlap must be in [0, 1]"),
    ],
)
def test_an_assumption_past_its_limits_is_refused_with_the_range(item, message):
    _refused(["experiments", "run", "wafer-yield", "--quick", "--assume", item], message)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "fp32_mul_width=1e30"], "fp32_mul_width must be in [0.125, 64] elements/cycle"),
        (["--set", "hop_latency_cycles=1e30"],
         "hop_latency_cycles must be in [1, 1000] cycles/hop"),
        (["--spec", "{d}/w.yaml"],
         "simd_widths['add.fp32'] must be in [0.125, 64] elements/cycle, got 1e+30"),
    ],
)  # fmt: skip
def test_a_spec_past_the_constants_limits_is_refused_too(tmp_path, args, message):
    # hunt 57: --set and spec files reach the same fields as --assume, and were priced
    (tmp_path / "w.yaml").write_text("base: wse3\nsimd_widths: {add.fp32: 1e30}\n")
    _refused(["wafer", "info", *(a.format(d=tmp_path) for a in args)], message)


def test_a_sweep_past_the_limits_is_refused_too():
    _refused(
        ["experiments", "run", "wafer-yield", "--quick", "--sweep", "fp32_mul_width=1,1e30"],
        "fp32_mul_width must be in [0.125, 64]",
    )


def test_every_preset_and_sweep_value_lies_within_the_limits():
    from wse_core.cost.assumptions import value_of
    from wse_core.cost.mechanisms import CONSTANTS
    from wse_core.hw.spec import PRESETS, preset

    for key, c in CONSTANTS.items():
        low, high = c.limits
        assert all(low <= v <= high for v in c.sweep), (key, c.sweep, c.limits)
        for name in PRESETS:
            assert low <= value_of(preset(name), key) <= high, (name, key)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    return zip_bomb_npz(tmp_path_factory.mktemp("bomb") / "bomb.npz")


@pytest.mark.parametrize(
    "args",
    [["view", "{b}", "--out", "{d}/v.html"], ["hpc", "tlrmvm", "run", "--operator", "{b}"]],
)
def test_a_zip_bomb_is_refused_from_the_zip_directory(bomb, tmp_path, args):
    line = _refused(
        [a.format(b=bomb, d=tmp_path) for a in args],
        "member 'u.npy' inflates to 256 MiB from 255 KiB (1,028x, a zip bomb?); a member over "
        "64 MiB may inflate at most 100x",
    )
    assert line
    assert list(tmp_path.iterdir()) == []


def test_a_stored_npz_of_the_same_size_is_not_a_bomb(tmp_path):
    """The ratio, not the size, is refused: np.savez's stored members (1x) pass the check."""
    import numpy as np
    from wse_core.host.readers import require_npz

    np.savez(tmp_path / "s.npz", u=np.zeros(80 << 17))  # 80 MiB stored
    with np.load(tmp_path / "s.npz") as z:
        require_npz(z, "s.npz", fits=lambda b: "")


def test_an_untouched_operator_still_runs(tmp_path):
    op = tmp_path / "op.npz"
    code, out = invoke(ROOT, ["hpc", "tlrmvm", "compress", "--n", "256", "--nb", "64", "--out", op])
    assert code == 0, out
    code, out = invoke(ROOT, ["hpc", "tlrmvm", "run", "--operator", op])
    assert code == 0, out


def _sparse(path: Path, size: int) -> Path:
    with open(path, "w") as f:  # a hole: no disk used, no byte of it read by the check
        f.write("4\n")
        f.truncate(size)
    return path


def _atoms(path: Path, n: int) -> Path:
    path.write_text(f'{n}\nLattice="3.6 0 0 0 3.6 0 0 0 3.6"\nCu 0 0 0\n')
    return path


@pytest.mark.parametrize(
    ("make", "message", "env"),
    [
        (lambda d: _sparse(d / "huge.xyz", 9 << 30),
         "huge.xyz is 9 GiB; extended XYZ files are read up to 8 GiB (a frame of 100,000,000 "
         "atoms; set WSE_LIMIT_XYZ_BYTES to lift it)", None),
        (lambda d: _atoms(d / "many.xyz", 200_000_000),
         "many.xyz line 1: the atom count must be in [1, 100,000,000] (set WSE_LIMIT_XYZ_ATOMS "
         "to lift it), got 200,000,000", None),
        (lambda d: _atoms(d / "few.xyz", 4),  # the override lowers it as well as lifting it
         "few.xyz line 1: the atom count must be in [1, 3] (set WSE_LIMIT_XYZ_ATOMS to lift it)",
         {"WSE_LIMIT_XYZ_ATOMS": "3"}),
        (lambda d: _sparse(d / "mid.xyz", 10 << 20),
         "reading mid.xyz (10 MiB) needs 160 MiB of host memory", {"WSE_HOST_MEMORY_BYTES": "1e8"}),
    ],
)  # fmt: skip
def test_an_xyz_file_past_its_limits_is_refused_before_it_is_read(tmp_path, cu, make, message, env):
    path = make(tmp_path)
    _refused(["hpc", "md", "--structure", path, "--potential", cu, "--steps", "1"], message, env)


def test_a_potential_file_past_the_file_bytes_limit_is_refused_unread(tmp_path, cu):
    # hunt 57: a 9 GiB potential file was read whole (a MemoryError traceback)
    xyz = _atoms(tmp_path / "one.xyz", 1)
    pot = _sparse(tmp_path / "huge.eam.alloy", 9 << 30)
    message = f"potential file '{pot}' is 9,663,676,416 bytes, over the limit"
    _refused(["hpc", "md", "--structure", xyz, "--potential", pot], message)


def test_an_npz_of_too_many_members_is_refused_by_count(tmp_path):
    # hunt 57: 200,000 one-value members took 30 s to refuse (each header opened)
    import io
    import zipfile

    import numpy as np

    one = io.BytesIO()
    np.save(one, np.zeros(1))
    with zipfile.ZipFile(tmp_path / "many.npz", "w") as z:
        for i in range(1_001):
            z.writestr(f"a{i}.npy", one.getvalue())
    message = "the archive holds 1,001 members; an .npz read here holds at most 1,000 arrays"
    _refused(["hpc", "tlrmvm", "run", "--operator", tmp_path / "many.npz"], message)
