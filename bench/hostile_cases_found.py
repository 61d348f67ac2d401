"""Issue 54's hostile cases: inputs found by trying every option of every command as a careless
or hostile user would (each fixed; apps/cli/tests/test_cli_hostile_found.py holds the same
classes as tests). Built as `hostile_cases.Case`s, each with the files it needs written into
its own temporary folder before the run (the bench snapshots the folder after that)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hostile_cases import _MD, Case, Fixtures, _const, _fill
from wse_cli.testing import setfl_with_line

_XYZ = '4\nLattice="{L}" Properties=species:S:1:pos:R:3 pbc="T T T"\n' + "\n".join(
    ["Cu {x} 0 0", "Cu 1.8075 1.8075 0", "Cu 1.8075 0 1.8075", "Cu 0 1.8075 1.8075"]
)


def _xyz(tmp: Path, lattice: str = "3.615 0 0 0 3.615 0 0 0 3.615", x: str = "0") -> str:
    (tmp / "in.xyz").write_text(_XYZ.format(L=lattice, x=x) + "\n")
    return str(tmp / "in.xyz")


def _xyz_text(props: str = "species:S:1:pos:R:3", extra: str = "") -> str:
    head = _XYZ.format(L="3.615 0 0 0 3.615 0 0 0 3.615", x="0")
    lines = head.replace("species:S:1:pos:R:3", props).splitlines()
    return "\n".join(lines[:2] + [ln + extra for ln in lines[2:]]) + "\n"


_LAMMPS_DATA = (
    "LAMMPS data file\n\n4 atoms\n1 atom types\n\n0 3.615 xlo xhi\n0 3.615 ylo yhi\n"
    "0 3.615 zlo zhi\n\nMasses\n\n1 63.546\n\nAtoms # atomic\n\n1 1 0 0 0\n"
)


def _fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "fifo")
    return str(tmp / "fifo")


def _setfl(fx: Fixtures, tmp: Path, line: int, text: str) -> str:
    return str(setfl_with_line(Path(fx.potential()), tmp, line, text))


def _trace_variant(fx: Fixtures, tmp: Path, **header) -> str:
    import numpy as np

    with np.load(fx.trace()) as f:
        arrays = {k: f[k] for k in f.files}
    head = json.loads(bytes(arrays["header"]))
    head.update(header)
    arrays["header"] = np.frombuffer(json.dumps(head).encode(), np.uint8)
    np.savez(tmp / "bad.npz", **arrays)
    return str(tmp / "bad.npz")


def _forged_npy(tmp: Path) -> str:
    head = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }".ljust(117)
    raw = b"\x93NUMPY\x01\x00" + (len(head) + 1).to_bytes(2, "little") + (head + "\n").encode()
    (tmp / "m.npy").write_bytes(raw)
    return str(tmp / "m.npy")


def _forged_operator(fx: Fixtures, tmp: Path) -> str:
    """The fixture operator with u.npy's header claiming 10^12 float32 values."""
    import zipfile

    head = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }".ljust(117)
    raw = b"\x93NUMPY\x01\x00" + (len(head) + 1).to_bytes(2, "little") + (head + "\n").encode()
    with zipfile.ZipFile(fx.operator()) as src, zipfile.ZipFile(tmp / "op.npz", "w") as out:
        for name in src.namelist():
            out.writestr(name, raw + bytes(64) if name == "u.npy" else src.read(name))
    return str(tmp / "op.npz")


def _text(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


def _copy(src: str, tmp: Path, name: str) -> str:
    (tmp / name).write_bytes(Path(src).read_bytes())
    return str(tmp / name)


def _model_with(fx: Fixtures, tmp: Path, **config) -> str:
    """The fixture model's folder with config.json keys changed."""
    import shutil

    shutil.copytree(fx.model(), tmp / "m")
    data = json.loads((tmp / "m" / "config.json").read_text())
    (tmp / "m" / "config.json").write_text(json.dumps({**data, **config}))
    return str(tmp / "m")


def found_cases() -> list[Case]:
    md = lambda fx: _fill(fx, _MD)  # noqa: E731
    pot = lambda fx: _fill(fx, ["{potential}"])[0]  # noqa: E731
    return [
        Case("found", "wafer info --spec <FIFO>", lambda fx, tmp: [
            "wafer", "info", "--spec", _fifo(tmp)], message="not a regular file"),
        Case("found", "wafer info --preset ''", _const("wafer", "info", "--preset", ""),
             message="unknown wafer preset ''"),
        Case("found", "wafer info --set clock_hz=1e308 --json", _const(
            "wafer", "info", "--set", "clock_hz=1e308", "--json"), message="overflows"),
        Case("found", "wafer defects 1e5 x 1e5 PEs", _const(
            "wafer", "defects", "--set", "pe_rows=100000", "--set", "pe_cols=100000"),
            message="host memory"),
        Case("found", "hpc md --structure NaN position", lambda fx, tmp: [
            "hpc", "md", "--structure", _xyz(tmp, x="nan"), "--potential", pot(fx)],
            message="finite"),
        Case("found", "hpc md --structure Lattice 1e300", lambda fx, tmp: [
            "hpc", "md", "--structure", _xyz(tmp, "1e300 0 0 0 1e300 0 0 0 1e300"),
            "--potential", pot(fx)], message="box sides"),
        Case("found", "hpc md setfl claiming 1e12 values", lambda fx, tmp: [
            *md(fx)[:-1], _setfl(fx, tmp, 4, "1000000000000 1e-1 1000 5e-3 5.7")],
            message="file ends early"),
        Case("found", "hpc md setfl value 1e308", lambda fx, tmp: [
            *md(fx)[:-1], _setfl(fx, tmp, 8, "1e308 0 0 0 0")], message="3.4e38"),
        Case("found", "hpc md --temperature-K 1e300", lambda fx, tmp: [
            *md(fx), "--temperature-K", "1e300"], message="--temperature-K"),
        Case("found", "hpc md --out /proc/x/y.xyz", lambda fx, tmp: [
            *md(fx), "--out", "/proc/x/y.xyz"], message="takes no new files"),
        Case("found", "hpc md potential --out <FIFO>", lambda fx, tmp: [
            "hpc", "md", "potential", "--elements", "Cu", "--out", _fifo(tmp)],
            message="not a regular file"),
        Case("found", "hpc md potential --knots 1e12", lambda fx, tmp: [
            "hpc", "md", "potential", "--elements", "Cu", "--knots", "1000000000000",
            "--out", str(tmp / "p.eam.alloy")], message="--knots"),
        Case("found", "view corrupt physical_shape", lambda fx, tmp: [
            "view", _trace_variant(fx, tmp, physical_shape=[1]), "--out", str(tmp / "v.html")],
            message="physical_shape"),
        Case("found", "view 1e6-character name", lambda fx, tmp: [
            "view", _trace_variant(fx, tmp, name="x" * 10**6), "--out", str(tmp / "v.html"),
            "--png", str(tmp / "v.png")], message="1,000 characters"),
        Case("found", "view t.npz --out t.npz", lambda fx, tmp: [
            "view", _copy(fx.trace(), tmp, "t.npz"), "--out", str(tmp / "t.npz")],
            message="destroy the input"),
        Case("found", "tlrmvm compress forged .npy header", lambda fx, tmp: [
            "hpc", "tlrmvm", "compress", "--matrix", _forged_npy(tmp), "--out",
            str(tmp / "op.npz")], message="more data than the file holds"),
        Case("found", "train model.d_model=1e30", _const(
            "train", "tiny", "model.d_model=1e30", "--validate-only"), message="integer"),
        Case("found", "train optimizer.beta1=2", _const(
            "train", "tiny", "optimizer.beta1=2", "--validate-only"), message="[0, 1)"),
        Case("found", "plan train 1e308 hours x 1e308 USD", _const(
            "plan", "train", "--model", "llama3-8b", "--tokens", "1e12", "--engineer-hours",
            "1e308", "--usd-per-engineer-hour", "1e308", "--json"), message="--engineer-hours"),
        Case("found", "infer generate --top-k 1e11", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.model(), "--prompt", "x", "--top-k",
            "99999999999"], message="--top-k"),
        Case("found", "infer generate --temperature 1e308", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.model(), "--prompt", "x", "--temperature",
            "1e308"], message="[0, 2]"),
        Case("found", "train params with key 1:", lambda fx, tmp: [
            "train", _text(tmp, "p.yaml", "model:\n  1: 2\n"), "--validate-only"],
            message="not a name"),
        Case("found", "wafer info spec with a key twice", lambda fx, tmp: [
            "wafer", "info", "--spec", _text(tmp, "s.yaml", "base: wse3\nclock_hz: 1e9\n"
            "clock_hz: 2e9\n")], message="duplicate key"),
        Case("found", "wafer info spec flops_per_cycle: 5", lambda fx, tmp: [
            "wafer", "info", "--spec", _text(tmp, "s.yaml", "base: wse3\nflops_per_cycle: 5\n")],
            message="must be a mapping"),
        Case("found", "hpc md xyz Properties=pos:R:3:species:S:1", lambda fx, tmp: [
            "hpc", "md", "--structure", _text(tmp, "in.xyz", _XYZ.format(
                L="3.615 0 0 0 3.615 0 0 0 3.615", x="0").replace(
                "species:S:1:pos:R:3", "pos:R:3:species:S:1") + "\n"), "--potential", pot(fx)],
            message="species:S:1"),
        Case("found", "WSE_HOST_MEMORY_BYTES=1e400", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.model(), "--prompt", "x", "--max-tokens", "1"],
            env={"WSE_HOST_MEMORY_BYTES": "1e400"}, message="WSE_HOST_MEMORY_BYTES"),
        Case("found", "experiments run --sweep of 10,000 values", _const(
            "experiments", "run", "wafer-yield", "--quick", "--sweep",
            "clock_hz=" + ",".join(["1e9"] * 10_000)), message="WSE_LIMIT_SWEEP_VALUES"),
        Case("found", "experiments run --sweep 1e9,,2e9 (hunt 58)", _const(
            "experiments", "run", "wafer-yield", "--quick", "--sweep", "clock_hz=1e9,,2e9"),
            message="--sweep's value 2 of 3 is empty"),
        Case("found", "plan infer --gamma without --draft (hunt 58)", _const(
            "plan", "infer", "--model", "llama3-8b", "--gamma", "4"),
            message="--gamma needs --draft"),
        Case("found", "plan infer --tokens-per-day 1e-300 (hunt 58)", _const(
            "plan", "infer", "--model", "llama3-8b", "--tokens-per-day", "1e-300"),
            message="[1, 1e+16] (tokens/day)"),
        Case("found", "WSE_LIMIT_SWEEP_VALUE (misspelt) (hunt 58)", _const("wafer", "info"),
             env={"WSE_LIMIT_SWEEP_VALUE": "100"}, message="is no limit (did you mean"),
        Case("found", "WSE_LIMIT_SWEEP_VALUES=1.5 (hunt 58)", _const("wafer", "info"),
             env={"WSE_LIMIT_SWEEP_VALUES": "1.5"}, message="must be a positive integer"),
        Case("found", "WSE_LIMIT_FILE_BYTES=1e26 (hunt 58)", _const("wafer", "info"),
             env={"WSE_LIMIT_FILE_BYTES": "1e26"}, message="of at most 64 bits"),
        Case("found", "JAX_PLATFORMS=nope (hunt 58)", _const("wafer", "check", "--grid", "3", "3"),
             env={"JAX_PLATFORMS": "nope"}, message="Unable to initialize backend 'nope'"),
        Case("found", "serve --speculative-config with a key twice (hunt 58)", _const(
            "infer", "serve", "--model-dir", "mock", "--port", "0", "--speculative-config",
            '{"num_speculative_tokens": 2, "num_speculative_tokens": 3}'),
            message="appears more than once"),
        Case("found", "serve --chat-template <empty file> (hunt 58)", lambda fx, tmp: [
            "infer", "serve", "--model-dir", "mock", "--port", "0", "--chat-template",
            _text(tmp, "t.jinja", "")], message="holds no Jinja"),
        Case("found", "infer generate --prompt-ids 1_0 (hunt 58)", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.model(), "--prompt-ids", "1_0"],
            message="must be comma-separated integers"),
        Case("found", "experiments run --sweep K --assume K=v (hunt 58)", _const(
            "experiments", "run", "wafer-yield", "--sweep", "clock_hz=1e9", "--assume",
            "clock_hz=2e9"), message="set the same assumption"),
        Case("found", "train --weight-chunks 1000000 (hunt 58)", _const(
            "train", "tiny", "--validate-only", "--weight-chunks", "1000000"),
            message="the widest matrix's columns"),
        Case("found", "experiments run --out '' (hunt 58)", _const(
            "experiments", "run", "wafer-yield", "--quick", "--out", ""),
            message="--out is empty; give a folder name"),
        Case("found", "infer serve --served-model-name ''", _const(
            "infer", "serve", "--model-dir", "mock", "--port", "0", "--served-model-name", ""),
            message="must not be empty"),
        Case("found", "WSE_CACHE_DIR is a file", lambda fx, tmp: ["wafer", "info"],
             env={"WSE_CACHE_DIR": "/etc/passwd"}, message="WSE_CACHE_DIR"),
        Case("found", "wafer info --nope (usage)", _const("wafer", "info", "--nope"),
             message="--help')"),
        Case("found", "wafer info spec name: 5", lambda fx, tmp: [
            "wafer", "info", "--spec", _text(tmp, "s.yaml", "base: wse3\nname: 5\n")],
            message="name must be text"),
        Case("found", "wafer info spec pe_rows: '100'", lambda fx, tmp: [
            "wafer", "info", "--spec", _text(tmp, "s.yaml", "base: wse3\npe_rows: '100'\n")],
            message="must be a number, got the text"),
        Case("found", "wafer info --set pe_rows=2**63", _const(
            "wafer", "info", "--set", "pe_rows=9223372036854775808"), message="[1, 100,000]"),
        Case("found", "wafer info 20 MB comment-only spec", lambda fx, tmp: [
            "wafer", "info", "--spec", _text(tmp, "s.yaml", "base: wse3\n" + "# pad pad\n"
            * 2_000_000)], message="WSE_LIMIT_YAML_BYTES"),
        Case("found", "plan train --tokens 1e308", _const(
            "plan", "train", "--model", "llama3-8b", "--tokens", "1e308"), message="1e+17]"),
        Case("found", "plan train --systems 2**62", _const(
            "plan", "train", "--model", "llama3-8b", "--tokens", "1e12", "--systems",
            str(2**62)), message="WSE_LIMIT_SYSTEMS"),
        Case("found", "train empty params file", lambda fx, tmp: [
            "train", _text(tmp, "p.yaml", ""), "--validate-only"], message="is empty"),
        Case("found", "train model.n_layers=1e9", _const(
            "train", "tiny", "model.n_layers=1000000000", "--validate-only"),
            message="[1, 4,096]"),
        Case("found", "train train_input.batch_size=2**63", _const(
            "train", "tiny", "train_input.batch_size=9223372036854775808", "--validate-only"),
            message="at most 1,048,576"),
        Case("found", "train params d_model: '128'", lambda fx, tmp: [
            "train", _text(tmp, "p.yaml", "model:\n  d_model: '128'\n"), "--validate-only"],
            message="write it unquoted (d_model: 128)"),
        Case("found", "train params learning_rate: \"3e-4\"", lambda fx, tmp: [
            "train", _text(tmp, "p.yaml", 'optimizer:\n  learning_rate: "3e-4"\n'),
            "--validate-only"], message="optimizer.learning_rate must be a number, got the text"),
        Case("found", "train params model.n_layers: 1e9", lambda fx, tmp: [
            "train", _text(tmp, "p.yaml", "model:\n  n_layers: 1e9\n"), "--validate-only"],
            message="model.n_layers must be an integer in [1, 4,096]"),
        Case("found", "wafer info --set pe_rows twice", _const(
            "wafer", "info", "--set", "pe_rows=10", "--set", "pe_rows=20"),
            message="--set gives pe_rows twice"),
        Case("found", "experiments run --assume clock_hz twice", _const(
            "experiments", "run", "wafer-yield", "--assume", "clock_hz=1e9", "--assume",
            "clock_hz=2e9"), message="--assume gives clock_hz twice"),
        Case("found", "infer serve --mock-max-context 1e15", _const(
            "infer", "serve", "--model-dir", "mock", "--mock-max-context", str(10**15)),
            message="--mock-max-context must be an integer in [2, 134217728]"),
        Case("found", "infer generate --max-context 1e12", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.model(), "--prompt-ids", "1",
            "--max-context", str(10**12)], message="is greater than the model's context"),
        Case("found", "infer generate --model-dir <config.json>", lambda fx, tmp: [
            "infer", "generate", "--model-dir", str(Path(fx.model()) / "config.json"),
            "--prompt-ids", "1"], message="is a file"),
        Case("found", "hpc swe --g 1e308", _const("hpc", "swe", "--g", "1e308"),
             message="--g must be a finite number in [1e-30, 1e+30]"),
        Case("found", "hpc cfd --ra 1e308", _const("hpc", "cfd", "--ra", "1e308"),
             message="--ra must be a finite number in [1, 1e+17]"),
        Case("found", "hpc tlrmvm compress --freq-hz 1e308", lambda fx, tmp: [
            "hpc", "tlrmvm", "compress", "--freq-hz", "1e308", "--out", str(tmp / "op.npz")],
            message="--freq-hz must be a finite number in (0, 1000000.0]"),
        Case("found", "train --num-csx 1e9", _const(
            "train", "tiny", "--validate-only", "--num-csx", str(10**9)),
            message="over the limit of 20,480 systems"),
        Case("found", "infer generate config.json hidden_size: '64'", lambda fx, tmp: [
            "infer", "generate", "--model-dir", _model_with(fx, tmp, hidden_size="64"),
            "--prompt-ids", "1"], message="hidden_size in config.json must be a number"),
        Case("found", "infer generate config.json tie_word_embeddings: 'false'",
             lambda fx, tmp: ["infer", "generate", "--model-dir", _model_with(
                 fx, tmp, tie_word_embeddings="false"), "--prompt-ids", "1"],
             message="must be true or false"),
        Case("found", "infer generate num_speculative_tokens 1e12", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.model(), "--prompt-ids", "1",
            "--speculative-config", json.dumps({"model": fx.model(),
                                                "num_speculative_tokens": 10**12})],
            message="num_speculative_tokens must be an integer in [1, 64]"),
        Case("found", "infer generate --stop ''", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.model(), "--prompt", "x", "--stop", ""],
            message="--stop strings must not be empty"),
        # hunt 56 (files): extended XYZ as users write it (each was taken or a traceback)
        Case("found", "hpc md --structure <LAMMPS data file>", lambda fx, tmp: [
            "hpc", "md", "--structure", _text(tmp, "cu.data", _LAMMPS_DATA),
            "--potential", pot(fx)], message="looks like a LAMMPS data file"),
        Case("found", "hpc md xyz pbc=\"F F F\"", lambda fx, tmp: [
            "hpc", "md", "--structure", _text(tmp, "in.xyz", _xyz_text().replace(
                'pbc="T T T"', 'pbc="F F F"')), "--potential", pot(fx)],
            message="only periodic boxes"),
        Case("found", "hpc md xyz NaN velocity", lambda fx, tmp: [
            "hpc", "md", "--structure", _text(tmp, "in.xyz", _xyz_text(
                "species:S:1:pos:R:3:velocities:R:3", " 0 0 0").replace(
                "Cu 0 0 0 0 0 0", "Cu 0 0 0 nan 0 0")), "--potential", pot(fx)],
            message="line 3 field 5: 'nan' is not a finite number"),
        Case("found", "hpc md xyz frames after a blank line", lambda fx, tmp: [
            "hpc", "md", "--structure", _text(tmp, "in.xyz", _xyz_text() + "\n" + _xyz_text()),
            "--potential", pot(fx)], message="text after the blank line 7"),
        Case("found", "hpc md xyz Properties count 1e12", lambda fx, tmp: [
            "hpc", "md", "--structure", _text(tmp, "in.xyz", _xyz_text(
                "species:S:1:pos:R:3:x:R:1000000000000")), "--potential", pot(fx)],
            message="Properties announces 1000000000004"),
        Case("found", "tlrmvm run operator with a forged u.npy header", lambda fx, tmp: [
            "hpc", "tlrmvm", "run", "--operator", _forged_operator(fx, tmp)],
            message="(its array headers) needs 3.64 TiB of host memory"),
        # hunt 57 (plan, wafer, view, launch, experiments): each taken, ignored, two lines or a hang
        Case("found", "plan train unknown model --png <no suffix>", lambda fx, tmp: [
            "plan", "train", "--model", "nope", "--tokens", "1e12", "--png", str(tmp / "p")],
            message="unknown model 'nope'"),
        Case("found", "view ''", _const("view", ""), message="FILE is empty or '.'"),
        Case("found", "experiments run --sweep twice", _const(
            "experiments", "run", "wafer-yield", "--sweep", "clock_hz=1e9", "--sweep",
            "clock_hz=2e9"), message="--sweep takes one assumption, given 2 times"),
        Case("found", "hpc stencil --kind jacobi --block-z 2", _const(
            "hpc", "stencil", "--kind", "jacobi", "--grid", "8", "8", "8", "--block-z", "2"),
            message="--block-z applies to --kind wave25 only"),
        Case("found", "hpc cfd --case cavity --ra 1e5", _const(
            "hpc", "cfd", "--case", "cavity", "--ra", "1e5"),
            message="--ra applies to --case rayleigh-benard only"),
        Case("found", "hpc stencil --tol 1e300", _const(
            "hpc", "stencil", "--kind", "bicgstab", "--grid", "8", "8", "8", "--tol", "1e300"),
            message="--tol must be a finite number in (0, 1)"),
        Case("found", "hpc cfd --dt 1e-300", _const("hpc", "cfd", "--dt", "1e-300"),
             message="--dt must be a finite number >= 1e-09"),
        Case("found", "infer bench --model ''", _const(
            "infer", "bench", "--url", "http://127.0.0.1:1", "--model", ""),
            message="--model must not be empty"),
        Case("found", "infer bench --model m, no server", _const(
            "infer", "bench", "--url", "http://127.0.0.1:1", "--model", "m", "-n", "2"),
            message="cannot reach http://127.0.0.1:1: ConnectError"),
        Case("found", "WSE_COORDINATOR=127.0.0.1:0", _const("hpc", "swe", "--n", "8"),
             env={"WSE_NUM_PROCESSES": "2", "WSE_PROCESS_ID": "1",
                  "WSE_COORDINATOR": "127.0.0.1:0"}, message="the port must be in [1, 65535]"),
        Case("found", "WSE_COORDINATOR=256.1.1.1:80", _const("hpc", "swe", "--n", "8"),
             env={"WSE_NUM_PROCESSES": "2", "WSE_PROCESS_ID": "1",
                  "WSE_COORDINATOR": "256.1.1.1:80"}, message="is no hostname, IPv4 address"),
        Case("found", "wafer info --set clock_hz=1e-300", _const(
            "wafer", "info", "--set", "clock_hz=1e-300"), message="[1e+06, 1e+11] Hz"),
        Case("found", "wafer info --set system_usd_per_hour=1e308", _const(
            "wafer", "info", "--set", "system_usd_per_hour=1e308"), message="[0, 1e+06] USD/h"),
        Case("found", "wafer defects --set spare_rows=100000", _const(
            "wafer", "defects", "--set", "spare_rows=100000"),
            message="spare_rows must be at most pe_rows (762)"),
        Case("found", "plan train --tokens 0.5", _const(
            "plan", "train", "--model", "llama3-8b", "--tokens", "0.5"), message="[1, 1e+17]"),
        Case("found", "plan infer --days 1e-300", _const(
            "plan", "infer", "--model", "llama3-8b", "--days", "1e-300"), message="[1, 36500]"),
        Case("found", "plan infer --wafers 20480", _const(
            "plan", "infer", "--model", "llama3-8b", "--users", "1", "--wafers", "20480"),
            message="give --wafers in [1, 32]"),
        Case("found", "plan infer 70B --draft for an 8B model", _const(
            "plan", "infer", "--model", "llama3-8b", "--draft", "llama3-70b", "--alpha", "0.5"),
            message="a draft must be at most the model's size"),
    ]  # fmt: skip
