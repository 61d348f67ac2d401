"""Hunt 57's hostile cases (each fixed; the tests are apps/cli/tests/test_cli_hostile_limits.py,
test_cli_hostile_train.py and packages/inference/tests/test_serve_hostile_fields.py): limits
with a name that were missing (an --assume value past its constant's range, a zip bomb, XYZ
files past MAX_XYZ_BYTES / MAX_XYZ_ATOMS) and `wse train`'s data files and run folders. Built
as `hostile_cases.Case`s, each writing the files it needs into its own temporary folder."""

from __future__ import annotations

from pathlib import Path

from hostile_cases import Case, _const, _fill


def _bomb(tmp: Path) -> str:
    from wse_cli.testing import zip_bomb_npz

    return str(zip_bomb_npz(tmp / "bomb.npz"))


def _sparse_xyz(tmp: Path, size: int) -> str:
    with open(tmp / "huge.xyz", "w") as f:  # a hole: no disk used
        f.write("4\n")
        f.truncate(size)
    return str(tmp / "huge.xyz")


def _text(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


def more_cases() -> list[Case]:
    pot = lambda fx: _fill(fx, ["{potential}"])[0]  # noqa: E731
    return [
        Case("more", "experiments run --assume fp32_mul_width=1e30", _const(
            "experiments", "run", "wafer-yield", "--quick", "--assume", "fp32_mul_width=1e30"),
            message="fp32_mul_width must be in [0.125, 64] elements/cycle"),
        Case("more", "experiments run --assume clock_hz=1e30", _const(
            "experiments", "run", "wafer-yield", "--quick", "--assume", "clock_hz=1e30"),
            message="clock_hz must be in [1e+06, 1e+11] Hz"),
        Case("more", "tlrmvm run --operator <zip bomb>", lambda fx, tmp: [
            "hpc", "tlrmvm", "run", "--operator", _bomb(tmp)], message="a zip bomb?"),
        Case("more", "view <zip bomb>", lambda fx, tmp: [
            "view", _bomb(tmp), "--out", str(tmp / "v.html")], message="a zip bomb?"),
        Case("more", "hpc md --structure <9 GiB sparse file>", lambda fx, tmp: [
            "hpc", "md", "--structure", _sparse_xyz(tmp, 9 << 30), "--potential", pot(fx)],
            message="MAX_XYZ_BYTES"),
        Case("more", "hpc md --structure with 2e8 atoms announced", lambda fx, tmp: [
            "hpc", "md", "--structure", _text(tmp, "in.xyz", '200000000\nLattice="3.6 0 0 0 '
            '3.6 0 0 0 3.6"\nCu 0 0 0\n'), "--potential", pot(fx)], message="MAX_XYZ_ATOMS"),
    ]  # fmt: skip
