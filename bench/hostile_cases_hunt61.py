"""Hunt 61's hostile cases (each fixed; the tests are
apps/cli/tests/test_cli_hostile_hunt61.py): LAMMPS potential files (headers past the file,
non-finite grid and element lines, an element twice, a setfl given twice, gzip'd), the TLR
operator's output name and a zero matrix, numbers in other scripts than ASCII, and CFD runs
whose Z column, step files or output folder would do harm. Built as `hostile_cases.Case`s,
each writing the files it needs into its own temporary folder. A write cut short by `ulimit
-f` (the atomic writers) needs a resource limit a `Case` cannot give: the tests check it."""

from __future__ import annotations

import gzip
from pathlib import Path

from hostile_cases import Case, Fixtures, _const
from hostile_cases_found import _setfl
from hostile_cases_more import _TRAIN

_MD = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4",
       "4", "--potential"]  # fmt: skip
_CFD = ["hpc", "cfd", "--preset", "small", "--grid", "16", "8", "1"]


def _many(tmp: Path, ne: int) -> str:
    """A setfl of `ne` elements of 5-point tables (the rest of the file was summed per table)."""
    lines = ["c", "c", "c", f"{ne} " + " ".join(f"E{i}" for i in range(ne)), "5 0.1 5 0.5 1.9"]
    lines += ["1 1.0 3.6 fcc", "0 0 0 0 0", "1 1 1 1 1"] * ne
    lines += ["0 0 0 0 0"] * (ne * (ne + 1) // 2)
    (tmp / "many.eam.alloy").write_text("\n".join(lines) + "\n")
    return str(tmp / "many.eam.alloy")


def _gz(fx: Fixtures, tmp: Path) -> str:
    (tmp / "Cu.eam.alloy").write_bytes(gzip.compress(Path(fx.potential()).read_bytes()))
    return str(tmp / "Cu.eam.alloy")


def _zero(tmp: Path) -> str:
    import numpy as np

    np.save(tmp / "zero.npy", np.zeros((64, 64)))
    return str(tmp / "zero.npy")


def _made(tmp: Path, name: str, link: bool = False) -> str:
    """`tmp/name` made a folder (or a link to nowhere); returns tmp/name without .npz."""
    if link:
        (tmp / name).symlink_to(tmp / "nowhere")
    else:
        (tmp / name).mkdir()
    return str(tmp / name.removesuffix(".npz"))


def _run_folder(tmp: Path) -> str:
    (tmp / "run").mkdir()
    (tmp / "run" / "step_0000005.npz").write_bytes(b"a first run's step")
    return str(tmp / "run")


def hunt61_cases() -> list[Case]:
    """Hunt 61's: each failed on the code before (the note says how)."""
    compress = ["hpc", "tlrmvm", "compress", "--n", "64", "--nb", "16", "--out"]
    stencil = ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset", "tiny"]
    return [
        Case("hunt61", "md <setfl naming 20,000 elements> (hunt 61)", lambda fx, tmp: [*_MD, _setfl(
            fx, tmp, 3, "20000 " + " ".join(f"E{i}" for i in range(20000)))],
            message="line 407 field 1", note="np.zeros of 2.91 TiB: a MemoryError traceback"),
        Case("hunt61", "md <setfl with Nr 1e10> (hunt 61)", lambda fx, tmp: [*_MD, _setfl(
            fx, tmp, 4, "1000 1e-1 10000000000 5e-3 5.7")], message="file ends early",
            note="np.zeros of 75 GiB: a MemoryError traceback"),
        Case("hunt61", "md <setfl with dr inf> (hunt 61)", lambda fx, tmp: [*_MD, _setfl(
            fx, tmp, 4, "1000 1e-1 1000 inf 5.7")], message="'inf' is not a finite number",
            note="ran (exit 0)"),
        Case("hunt61", "md <setfl with drho 1e308> (hunt 61)", lambda fx, tmp: [*_MD, _setfl(
            fx, tmp, 4, "1000 1e308 1000 5e-3 5.7")], message="'1e308' is not a finite number",
            note="ran (exit 0)"),
        Case("hunt61", "md <setfl with mass inf> (hunt 61)", lambda fx, tmp: [*_MD, _setfl(
            fx, tmp, 5, "29 inf 3.615 fcc")], message="'inf' is not a finite number",
            note="ran and blew up (exit 1)"),
        Case("hunt61", "md <setfl naming Cu twice> (hunt 61)", lambda fx, tmp: [*_MD, _setfl(
            fx, tmp, 3, "3 Cu Ni Cu")], message="element 'Cu' is named twice",
            note="a table value read as an element line"),
        Case("hunt61", "md <setfl of 600 elements of tiny tables> (hunt 61)", lambda fx, tmp: [
            *_MD, _many(tmp, 600)], message="(600 in all)",
            note="~20 s (the rest of the file summed per table; 1,000 elements: past a minute), "
                 "then a line naming all 600"),
        Case("hunt61", "md --potential <setfl> --potential <setfl> (hunt 61)", lambda fx, tmp: [
            *_MD, fx.potential(), "--potential", fx.potential()], message="give it alone",
            note="the second file was ignored"),
        Case("hunt61", "md --potential <gzip'd setfl> (hunt 61)", lambda fx, tmp: [
            *_MD, _gz(fx, tmp)],
             message="gzip-compressed: unpack it", note="'is not a text file'"),
        Case("hunt61", "tlrmvm compress --out op (op.npz a folder) (hunt 61)", lambda fx, tmp: [
            *compress, _made(tmp, "op.npz")], message="op.npz is a folder",
            note="IsADirectoryError traceback after the work"),
        Case("hunt61", "tlrmvm compress --out op (op.npz a bad link) (hunt 61)", lambda fx, tmp: [
            *compress, _made(tmp, "op.npz", link=True)], message="cannot be followed",
            note="FileNotFoundError traceback after the work"),
        Case("hunt61", "tlrmvm compress --matrix <zeros> (hunt 61)", lambda fx, tmp: [
            *compress[:-5], "--matrix", _zero(tmp), "--nb", "16", "--out", str(tmp / "z.npz")],
            message="the operator is zero", note="a RuntimeWarning, a NaN error, exit 0"),
        Case("hunt61", "tlrmvm run --kernel nope --layout packed (hunt 61)", lambda fx, tmp: [
            "hpc", "tlrmvm", "run", "--operator", fx.operator(), "--kernel", "nope", "--layout",
            "packed"], message="unknown kernel 'nope'", note="ignored (exit 0)"),
        Case("hunt61", "stencil --steps ١٠ (Arabic-Indic) (hunt 61)", _const(
            *stencil, "--steps", "١٠"), message="--steps must be an integer", note="read as 10"),
        Case("hunt61", "stencil --grid 4 4 ４ (a fullwidth digit) (hunt 61)", _const(
            *stencil[:5], "4", "4", "４", "--preset", "tiny"), message="--grid must be an integer",
            note="read as 4"),
        Case("hunt61", "WSE_LIMIT_TIME_STEPS=١٠ (hunt 61)", _const(*stencil, "--steps", "1"),
             env={"WSE_LIMIT_TIME_STEPS": "١٠"}, message="WSE_LIMIT_TIME_STEPS must be",
             note="read as 10"),
        Case("hunt61", "WSE_HOST_MEMORY_BYTES=١٠٠ (hunt 61)", lambda fx, tmp: [*compress, str(
            tmp / "x.npz")], env={"WSE_HOST_MEMORY_BYTES": "١٠٠"},
            message="WSE_HOST_MEMORY_BYTES must be a number", note="read as 100 bytes"),
        Case("hunt61", "cfd --grid 16 8 100000000 (hunt 61)", _const(
            *_CFD[:5], "16", "8", "100000000"),
             message="Z column of 100,000,000", note="95 GiB of host arrays: MemoryError"),
        Case("hunt61", "cfd --steps 3000000 --output-every 1 --out (hunt 61)", lambda fx, tmp: [
            *_CFD, "--steps", "3000000", "--output-every", "1", "--out", str(tmp / "run")],
            message="over the limit of 10,000 step files",
            note="wrote 142,480 files in 90 s before it was stopped"),
        Case("hunt61", "cfd --out <another run's folder> (hunt 61)", lambda fx, tmp: [
            *_CFD, "--steps", "3", "--out", _run_folder(tmp)],
            message="holds another run's step files",
            note="mixed its step files with the first run's (--restart took the newest)"),
        Case("hunt61", "md --structure '' (hunt 61)", lambda fx, tmp: [
            "hpc", "md", "--structure", "", "--potential", fx.potential()],
            message="--structure is empty", note="\"structure file '.' is a folder\""),
        Case("hunt61", "infer generate --model-dir '' (hunt 61)", _const(
            "infer", "generate", "--model-dir", "", "--prompt", "x"),
            message="--model-dir is empty", note="\"'.' is neither an HF-format directory\""),
        Case("hunt61", "plan train --model '' (hunt 61)", _const(
            "plan", "train", "--model", "", "--tokens", "1e12"), message="--model is empty",
            note="cannot read HF config 'config.json': [Errno 2] ..."),
        Case("hunt61", "train '' (hunt 61)", _const("train", "", "--validate-only"),
             message="the params file is empty text", note="\"params file '.' is a folder\""),
        Case("hunt61", "md potential --out p.txt (hunt 61)", lambda fx, tmp: [
            "hpc", "md", "potential", "--elements", "Cu", "--out", str(tmp / "p.txt")],
            message="give a name ending in .eam.alloy",
            note="written, then read by --potential as funcfl"),
        Case("hunt61", "md potential of 16 elements at 100,000 knots (hunt 61)", lambda fx, tmp: [
            "hpc", "md", "potential", "--elements", "Cu", "Ni", "Al", "Fe", "Ag", "Au", "Pd",
            "Pt", "Pb", "W", "Mo", "Ta", "Co", "Ti", "Zr", "Mg", "--knots", "100000", "--out",
            str(tmp / "p.eam.alloy")], message="over the limit of 67,108,864 bytes",
            note="wrote 397 MB in 15 s, a file --potential refuses"),
        Case("hunt61", "plan train --micro-batch ٢ (hunt 61)", _const(
            "plan", "train", "--model", "llama3-8b", "--tokens", "1e12", "--batch", "8",
            "--micro-batch", "٢"), message="--micro-batch must be", note="read as 2"),
        Case("hunt61", "md --structure <bzip2'd xyz> (hunt 61)", lambda fx, tmp: [
            "hpc", "md", "--structure", _bz2_xyz(tmp), "--potential", fx.potential()],
            message="bzip2-compressed: unpack it", note="'line 1: not UTF-8 text'"),
        Case("hunt61", "train data_dir=<a .jsonl line 100,000 levels deep> (hunt 61)",
             lambda fx, tmp: [*_TRAIN, f"train_input.data_dir={_deep_jsonl(tmp)}", "-o",
                              str(tmp / "run")], message="nests JSON 100,000 levels deep",
             note="a segmentation fault in pyarrow's JSON reader, after the run folder"),
        Case("hunt61", "tlrmvm run --operator <nb 16.5> (hunt 61)", lambda fx, tmp: [
            "hpc", "tlrmvm", "run", "--operator", _op_with(fx, tmp, nb=16.5)],
            message="nb must be one integer", note="truncated to 16 and run"),
        Case("hunt61", "tlrmvm run --operator <error_fro inf> (hunt 61)", lambda fx, tmp: [
            "hpc", "tlrmvm", "run", "--operator", _op_with(fx, tmp, error_fro=float("inf"))],
            message="error_fro must be a finite number", note="printed as the error, exit 0"),
        Case("hunt61", "infer generate <config.json rope_theta 1e308> (hunt 61)",
             lambda fx, tmp: ["infer", "generate", "--model-dir", _model_with(
                 fx, tmp, rope_theta=1e308, rope_parameters={"rope_type": "default",
                                                             "rope_theta": 1e308}),
                 "--prompt-ids", "1,2", "--max-tokens", "2"],
             message="rope_theta must be a finite number > 0 within fp32",
             note="ran, with JAX's overflow-in-cast warnings, exit 0"),
        Case("hunt61", "wafer info --set pe_rows=١٠ (hunt 61)", _const(
            "wafer", "info", "--set", "pe_rows=١٠"), message="pe_rows must be a number",
            note="read as 10"),
        Case("hunt61", "experiments run --assume fp32_mul_width=４ (hunt 61)", _const(
            "experiments", "run", "wafer-yield", "--quick", "--assume", "fp32_mul_width=４"),
            message="must be a number, got '４'", note="read as 4 and run"),
    ]  # fmt: skip


def _model_with(fx: Fixtures, tmp: Path, **config) -> str:
    """A copy of the tiny model dir whose config.json has `config`'s keys."""
    import json
    import shutil

    shutil.copytree(fx.model(), tmp / "m")
    data = json.loads((tmp / "m" / "config.json").read_text())
    (tmp / "m" / "config.json").write_text(json.dumps({**data, **config}))
    return str(tmp / "m")


def _op_with(fx: Fixtures, tmp: Path, **change) -> str:
    """The fixtures' operator with `change`'s arrays."""
    import numpy as np

    with np.load(fx.operator()) as f:
        data = {k: f[k] for k in f.files}
    np.savez(tmp / "op.npz", **{**data, **{k: np.asarray(v) for k, v in change.items()}})
    return str(tmp / "op.npz")


def _deep_jsonl(tmp: Path) -> str:
    (tmp / "docs").mkdir()
    line = '{"text": "the wafer streams weights ' + "x" * 500 + '"}\n'
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000 + "\n"
    (tmp / "docs" / "a.jsonl").write_text(line * 20 + deep)
    return str(tmp / "docs")


def _bz2_xyz(tmp: Path) -> str:
    import bz2

    (tmp / "cu.xyz").write_bytes(bz2.compress(b"1\nLattice=...\nCu 0 0 0\n"))
    return str(tmp / "cu.xyz")
