"""Hostile inputs found by issue 54's hunt (every option of every command, tried as a careless
or hostile user would): each exits 2 with one line that names the input and what is allowed,
before any work, with nothing written. Before the fix: a FIFO as --spec hung, --preset ''
ran the default wafer, clock_hz=1e308 printed Infinity into --json, a spec without base:
quoted WaferSpec.__init__'s TypeError, and a 10^5 x 10^5 PE wafer's defect map was
attempted (a numpy MemoryError traceback)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line, setfl_with_line

ROOT = typer.main.get_command(app)


def _refused(args: list, message: str, env: dict[str, str] | None = None) -> str:
    return refused_in_one_line(ROOT, args, message, env)


@pytest.fixture
def files(tmp_path) -> Path:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "bare.yaml").write_text("clock_hz: 1.0e9\n")
    (tmp_path / "nan_flops.yaml").write_text("base: wse3\nflops_per_cycle: {fp32: .nan}\n")
    (tmp_path / "inf_latency.yaml").write_text("base: wse3\nsystem_latency_s: .inf\n")
    return tmp_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["wafer", "info", "--spec", "{d}/fifo"], "not a regular file"),
        (["wafer", "info", "--spec", "{d}"], "is a folder"),
        (["wafer", "info", "--spec", "{d}/bare.yaml"], "lacks the fields name, pe_rows"),
        (["wafer", "info", "--spec", "{d}/nan_flops.yaml"], "flops_per_cycle needs positive"),
        (["wafer", "info", "--spec", "{d}/inf_latency.yaml"], "system_latency_s must be"),
        (["wafer", "info", "--preset", ""], "unknown wafer preset ''"),
        (["hpc", "stencil", "--preset", "", "--kind", "jacobi", "--grid", "4", "4", "4"],
         "unknown wafer preset ''"),
        (["wafer", "info", "--set", "clock_hz=1e308", "--json"], "overflows a float"),
        (["wafer", "defects", "--set", "pe_rows=100000", "--set", "pe_cols=100000"],
         "of host memory"),
        (["wafer", "defects", "--set", "spare_rows=100000000000"], "[0, 100,000]"),
        (["wafer", "check", "--repeat", "1000000000"],
         "--repeat must be an integer in [1, 10000000]"),
    ],
)  # fmt: skip
def test_wafer_inputs_are_refused_in_one_line(files, args, message):
    _refused([a.format(d=files) for a in args], message)


# --- MD inputs: structure and potential files, and options -----------------------------
XYZ_HEAD = ["4", 'Lattice="{L}" Properties=species:S:1:pos:R:3 pbc="T T T"']
XYZ_ATOMS = ["Cu {x} 0 0", "Cu 1.8075 1.8075 0", "Cu 1.8075 0 1.8075", "Cu 0 1.8075 1.8075"]


def _xyz(folder: Path, name: str, lattice: str = "3.615 0 0 0 3.615 0 0 0 3.615", x="0"):
    path = folder / f"{name}.xyz"
    head = [XYZ_HEAD[0], XYZ_HEAD[1].format(L=lattice)]
    path.write_text("\n".join([*head, *(a.format(x=x) for a in XYZ_ATOMS)]) + "\n")
    return path


def _text(folder: Path, name: str, text: str) -> Path:
    (folder / name).write_text(text)
    return folder / name


def _sub(path: Path, old: str, new: str) -> Path:
    path.write_text(path.read_text().replace(old, new))
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d, cu: _xyz(d, "nan", x="nan"), "nan.xyz line 3 field 2: 'nan' is not a finite"),
        (lambda d, cu: _xyz(d, "huge", x="1e308"), "lies outside the box"),
        (lambda d, cu: _xyz(d, "nanbox", lattice="nan 0 0 0 3.6 0 0 0 3.6"), "box sides must"),
        (lambda d, cu: _xyz(d, "hugebox", lattice="1e300 0 0 0 1e300 0 0 0 1e300"), "at most"),
        (lambda d, cu: d, "is a folder"),
        (lambda d, cu: d / "fifo", "not a regular file"),
        # hunt 56 (files): a LAMMPS data file, pbc F (was run periodic), a Properties count of
        # 10^12 (was a 29 TiB np.empty), frames after a blank line (were dropped)
        (lambda d, cu: _text(d, "cu.data", "LAMMPS data\n\n4 atoms\n1 atom types\n"),
         "cu.data line 1: expected the atom count, got 'LAMMPS data': it looks like a LAMMPS "
         "data file (read_data format); --structure reads extended XYZ"),
        (lambda d, cu: _sub(_xyz(d, "pbc"), 'pbc="T T T"', 'pbc="T T F"'),
         'pbc.xyz line 2: pbc="T T F": only periodic boxes are supported'),
        (lambda d, cu: _sub(_xyz(d, "props"), "pos:R:3", "pos:R:3:x:R:1000000000000"),
         "props.xyz line 3: 4 fields, Properties announces 1000000000004"),
        (lambda d, cu: _text(d, "gap.xyz", _xyz(d, "one").read_text() * 1 + "\n4\n"),
         "gap.xyz line 8: text after the blank line 7 ('4')"),
    ],
)  # fmt: skip
def test_md_structure_files(files, cu, make, message):
    args = ["hpc", "md", "--structure", make(files, cu), "--potential", cu, "--steps", "1"]
    _refused(args, message)


@pytest.mark.parametrize(
    ("line", "text", "message"),
    [
        (4, "1000000000000 1e-1 1000 5e-3 5.7", "file ends early"),  # was a 7 TiB np.empty
        (8, "1e308 0 0 0 0", "within +-3.4e38"),  # was fp32 overflow warnings and a run
    ],
)
def test_md_potential_files(files, cu, line, text, message):
    pot = setfl_with_line(cu, files, line, text)
    base = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615"]
    _refused([*base, "--cells", "4", "4", "4", "--potential", pot], message)


def test_md_potential_that_is_a_folder_or_fifo(files):
    base = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells"]
    _refused([*base, "4", "4", "4", "--potential", files], "is a folder")
    _refused([*base, "4", "4", "4", "--potential", files / "fifo"], "not a regular file")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--temperature-K", "1e300"], "--temperature-K must be"),
        (["--element", " "], "--element must name an element"),
        (["--out", "/proc/x/y.xyz"], "takes no new files"),
        (["--out", "{d}/fifo"], "not a regular file"),
        (["--out", "/dev/full"], "not a regular file"),
        (  # hunt 65: a thermostat needs its target (--temperature-K) before its damping
            ["--thermostat", "langevin", "--temperature-K", "300", "--damp-fs", "1e-300"],
            "is shorter than the timestep",
        ),
        (
            ["--thermostat", "nose-hoover", "--temperature-K", "300", "--damp-fs", "0.5"],
            "is shorter than the timestep",
        ),
    ],
)
def test_md_options(files, cu, extra, message):
    # an --element of extra's is the only one (hunt 67: a second was refused as given twice)
    element = [] if "--element" in extra else ["--element", "Cu"]
    base = ["hpc", "md", "--lattice", "fcc", *element, "--a", "3.615", "--cells"]
    args = [*base, "4", "4", "4", "--potential", cu, "--steps", "1"]
    _refused([*args, *(a.format(d=files) for a in extra)], message)


def test_md_potential_knots_and_outputs(files):
    base = ["hpc", "md", "potential", "--elements", "Cu", "--out"]
    _refused([*base, files / "x.eam.alloy", "--knots", "1000000000000"], "--knots must be")
    _refused([*base, "/proc/x/Cu.eam.alloy"], "takes no new files")
    _refused(["wafer", "defects", "--png", "/sys/x.png"], "takes no new files")
    assert not (files / "x.eam.alloy").exists()


def test_a_full_disk_mid_write_is_one_line_and_exit_1(monkeypatch, files):
    import errno

    import wse_hpc.md as md

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(md, "write_setfl", full)
    code, output = invoke(
        ROOT, ["hpc", "md", "potential", "--elements", "Cu", "--out", files / "p.eam.alloy"]
    )
    assert code == 1 and output.strip() == "Error: cannot write: No space left on device", output


# --- wse view: corrupt traces, and outputs that are inputs ------------------------------
@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trace") / "t.npz"
    args = ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset", "tiny"]
    code, output = invoke(ROOT, [*args, "--steps", "1", "--trace", out])
    assert code == 0, output
    return out


def _variant(trace: Path, folder: Path, change) -> Path:
    import json

    import numpy as np

    with np.load(trace) as f:
        arrays = {k: f[k] for k in f.files}
    head = json.loads(bytes(arrays["header"]))
    change(head, arrays)
    arrays["header"] = np.frombuffer(json.dumps(head).encode(), np.uint8)
    out = folder / "bad.npz"
    np.savez(out, **arrays)
    return out


def _set(**kv):
    return lambda head, arrays: head.update(kv)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h, a: a.update(sram_bytes=a["sram_bytes"].astype("U3")), "real numbers"),
        (lambda h, a: a.update(sram_bytes=a["sram_bytes"].astype(complex)), "real numbers"),
        (_set(physical_shape=[1]), "physical_shape must be"),
        (_set(layers="x"), "layers must be a list"),
        (_set(name="x" * 10**6), "at most 1,000 characters"),  # was a minute in matplotlib
        (lambda h, a: h.update(regions=h["regions"] * 100_000), "at most 10,000"),
    ],
)
def test_view_refuses_corrupt_traces(trace, tmp_path, change, message):
    bad = _variant(trace, tmp_path, change)
    _refused(["view", bad, "--out", tmp_path / "v.html", "--png", tmp_path / "v.png"], message)
    assert not (tmp_path / "v.html").exists() and not (tmp_path / "v.png").exists()


def test_view_names_a_missing_header_once(tmp_path):
    import numpy as np

    np.savez(tmp_path / "no_header.npz", dead=np.zeros((0, 2), dtype=np.int64))
    line = _refused(["view", tmp_path / "no_header.npz"], "array 'header' is missing")
    assert "not a file in the archive" not in line


def test_an_output_that_is_an_input_is_refused(trace, tmp_path):
    import shutil

    t = tmp_path / "t.npz"
    shutil.copy(trace, t)
    before = t.read_bytes()
    _refused(["view", t, "--out", t], "would destroy the input")
    _refused(["view", t, "--out", tmp_path / "a.png", "--png", tmp_path / "a.png"], "both")
    _refused(["hpc", "tlrmvm", "run", "--operator", t, "--trace", t], "destroy the input")
    assert t.read_bytes() == before  # was overwritten with the HTML page


@pytest.mark.parametrize(
    "args",
    [["wafer", "info", "--nope"], ["nope"], ["hpc", "stencil"], ["--nope", "wafer", "info"],
     ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "extra"]],
)  # fmt: skip
def test_click_usage_errors_are_one_line(args):
    _refused(args, "--help')")


# --- tlrmvm compress --matrix: forged, pickled and out-of-range .npy files ---------------
def _forged_npy(path: Path) -> Path:
    head = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }"
    head = head.ljust(117) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode())
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_forged_npy, "claims more data than the file holds"),  # was a 7 TiB MemoryError
        (lambda p: __import__("numpy").save(p, __import__("numpy").full((8, 8), 1e308)) or p,
         "beyond fp32's range"),  # was overflow warnings, then the NaN message
    ],
)  # fmt: skip
def test_tlrmvm_matrix_files(tmp_path, make, message):
    m = make(tmp_path / "m.npy")
    args = ["hpc", "tlrmvm", "compress", "--matrix", m, "--nb", "4", "--out"]
    _refused([*args, tmp_path / "op.npz"], message)
    assert not (tmp_path / "op.npz").exists()


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("  d_model: 1e30\n", "model.d_model must be an integer in [1, 1,048,576], got 1.0"),
        ("  norm_eps: .nan\n", "norm_eps must be a finite number > 0"),
        ("  rope_theta: -1\n", "rope_theta must be a finite number > 0"),
    ],
)
def test_train_model_fields(tmp_path, model, message):
    params = tmp_path / "p.yaml"
    params.write_text("model:\n" + model)
    _refused(["train", params, "--validate-only"], message)


@pytest.mark.parametrize(
    "override",
    ["optimizer.beta1=2", "optimizer.eps=0", "optimizer.max_gradient_norm=-1",
     "optimizer.warmup_steps=-1", "optimizer.decay_steps=0", "train_input.shuffle_seed=-1"],
)  # fmt: skip
def test_train_optimizer_ranges(override):
    _refused(["train", "tiny", override, "--validate-only"], override.split("=")[0])


@pytest.mark.parametrize(
    "args",
    [["plan", "train", "--model", "llama3-8b", "--tokens", "1e12", "--engineer-hours", "1e308",
      "--usd-per-engineer-hour", "1e308", "--json"],
     ["plan", "infer", "--model", "llama3-8b", "--usd-per-kwh", "1e308", "--json"]],
)  # fmt: skip
def test_plan_totals_that_overflow_are_refused(args):
    _refused(args, "must be a finite number in [0, ")  # --json printed Infinity (not JSON)


def test_generate_top_k_past_int32_is_refused_at_parsing():
    args = ["infer", "generate", "--model-dir", "x", "--prompt", "x", "--top-k", "99999999999"]
    _refused(args, "--top-k must be an integer in [-1, 2147483647]")  # was an OverflowError


@pytest.mark.parametrize(
    ("value", "message"),
    [("{d}/bare.yaml", "is not a folder"), ("{d}/bare.yaml/sub", "cannot be made"),
     ("/proc/wse-cache", "cannot be made")],
)  # fmt: skip
def test_a_cache_dir_that_cannot_hold_the_cache_is_refused(files, value, message):
    # JAX warned on every compile (two lines of UserWarning) and ran without its cache
    _refused(["wafer", "info"], message, env={"WSE_CACHE_DIR": value.format(d=files)})


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--host", ""], "--host must be an address"),  # uvicorn bound every interface
     (["--served-model-name", " "], "leading or trailing blanks"),
     (["--served-model-name", "m\udcff"], "must be printable UTF-8"),  # /v1/models: 500
     (["--served-model-name", "a\nb"], "must be printable UTF-8"),
     (["--mock-step-delay-ms", "1e300"], "--mock-step-delay-ms must be"),  # OverflowError
     (["--drain-s", "1e300"], "--drain-s must be"),  # OverflowError at shutdown
     (["--max-queued", "1000000000000"], "--max-queued must be")],
)  # fmt: skip
def test_serve_options(extra, message):
    _refused(["infer", "serve", "--model-dir", "mock", "--port", "0", *extra], message)


@pytest.mark.parametrize(
    "args",
    [["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset", "tiny"],
     ["hpc", "swe", "--n", "8", "--preset", "tiny"], ["hpc", "cfd", "--grid", "8", "8", "1"]],
)  # fmt: skip
def test_steps_past_int32_are_refused(args):
    # JAX's OverflowError traceback when the count reached the jitted loop
    # refused by the limit in force, below int32 (hunt 67: it named [0, 2147483647])
    _refused([*args, "--steps", "1000000000000"], "--steps is 1,000,000,000,000, over the limit")


def test_cfd_restart_from_a_garbage_or_other_grid_step_file(tmp_path):
    (tmp_path / "step_0000010.npz").write_text("garbage")
    base = ["hpc", "cfd", "--grid", "8", "8", "1", "--steps", "1", "--out", tmp_path, "--restart"]
    _refused(base, "is not a step file")  # was NumPy's pickle ValueError traceback
    for opt, value in (("--aspect", "1e300"), ("--pr", "1e-308"), ("--re", "1e-300")):
        _refused(["hpc", "cfd", opt, value], f"{opt} must be")  # OverflowError / fp32 overflow


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--url", "http://[::1"], "is not a URL"),  # httpx.InvalidURL traceback
     (["--url", "http://127.0.0.1:99999"], "Port out of range"),  # OverflowError traceback
     (["--url", "ftp://x"], "must be http(s)://"),
     (["--url", "http://127.0.0.1:9", "-c", "1000000000"], "--concurrency must be")],
)  # fmt: skip
def test_bench_urls_and_sizes(tmp_path, extra, message):
    _refused(["infer", "bench", *extra, "--out", tmp_path / "b.json"], message)
    assert not (tmp_path / "b.json").exists()


def test_launch_inside_launch_is_refused():
    _refused(["launch", "--nproc", "2", "--", "launch", "--nproc", "2", "--", "wafer", "check"],
             "wse launch cannot run inside wse launch")  # fmt: skip
