"""Hostile inputs fixed by hunt 61: each exits 2 with one line naming the input and what would
be right, before any work, with nothing half-written. Before the fixes: a setfl naming 20,000
elements (or Nr 10^10) was a MemoryError traceback (np.zeros of the tables before one value was
read); dr / mass / drho given as inf or 1e308 ran (and blew up, exit 1); a setfl given twice
ran on the first; a gzip'd potential was "not a text file"; `ulimit -f` cut an existing
potential or operator to its size (the old file lost); `tlrmvm compress --out op` wrote
op.npz unchecked (a folder there: a traceback after the work); a zero matrix printed NaN
after a RuntimeWarning; `--kernel nope` was ignored outside the grouped layout; '١٠' and
'１０' were read as 10; `wse hpc cfd` with NZ 10^8 built 95 GiB of host arrays, with
`--output-every 1 --steps 3000000` wrote files until stopped, and a second run into a run's
`--out` mixed its step files with the first's."""

from __future__ import annotations

import bz2
import gzip
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line, setfl_with_line

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)
MD = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4", "4"]


@pytest.mark.parametrize(
    ("line", "text", "message"),
    [
        (3, "20000 " + " ".join(f"E{i}" for i in range(20000)),
         "line 407 field 1: "),  # E1's element line: was a 2.91 TiB np.zeros up front
        (4, "1000 1e-1 10000000000 5e-3 5.7",
         "file ends early: expected 10000000000 values of rho(r) of Cu"),  # was 75 GiB
        (4, "1000 1e-1 1000 inf 5.7", "line 5 field 4: 'inf' is not a finite number"),  # ran
        (4, "1000 1e308 1000 5e-3 5.7", "line 5 field 2: '1e308' is not a finite number"),
        (4, "1000 1e36 1000 5e-3 5.7", "the rho table spans (Nrho - 1) * drho = 9.99e+38"),
        (5, "29 inf 3.615 fcc", "line 6 field 2: 'inf' is not a finite number"),  # blew up
        (5, "29 63.5 nan fcc", "line 6 field 3: 'nan' is not a finite number"),
        (3, "3 Cu Ni Cu", "line 4: element 'Cu' is named twice; name each once"),
    ],
    ids=["20000 elements", "Nr 1e10", "dr inf", "drho 1e308", "rho span", "mass inf",
         "alat nan", "element twice"],
)  # fmt: skip
def test_a_setfl_header_is_checked_before_its_tables_are_allocated(tmp_path, cu, line, text,
                                                                   message):  # fmt: skip
    refused_in_one_line(
        ROOT, [*MD, "--potential", setfl_with_line(cu, tmp_path, line, text)], message
    )


def test_a_setfl_is_given_alone(cu):
    refused_in_one_line(ROOT, [*MD, "--potential", cu, "--potential", cu],
                        "holds every element of its potential: give it alone")  # fmt: skip


def test_a_compressed_input_says_to_unpack_it(tmp_path, cu):
    # hunt 61: "is not a text file", "line 1: not UTF-8 text (invalid start byte ...)"
    packed = tmp_path / "Cu.eam.alloy"
    packed.write_bytes(gzip.compress(cu.read_bytes()))
    message = "is not a text file (it is gzip-compressed: unpack it with gunzip first)"
    refused_in_one_line(ROOT, [*MD, "--potential", packed], message)
    (tmp_path / "cu.xyz").write_bytes(bz2.compress(b"1\nLattice=...\nCu 0 0 0\n"))
    message = "cu.xyz is not extended XYZ text (it is bzip2-compressed: unpack it with bunzip2"
    refused_in_one_line(ROOT, ["hpc", "md", "--structure", tmp_path / "cu.xyz", "--potential",
                               cu], message)  # fmt: skip


def _capped(args: list[str], cwd: Path, file_bytes: int) -> subprocess.CompletedProcess:
    """`wse ARGS` with writes capped at `file_bytes` (`ulimit -f`: EFBIG past it)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, resource.RLIM_INFINITY))

    return subprocess.run([sys.executable, "-m", "wse_cli", *args], cwd=cwd, preexec_fn=cap,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "args"),
    [("Cu.eam.alloy", ["hpc", "md", "potential", "--elements", "Cu", "--knots", "2000"]),
     ("op.npz", ["hpc", "tlrmvm", "compress", "--n", "256", "--nb", "64"])],
    ids=["setfl", "operator"],
)  # fmt: skip
def test_a_write_that_fails_leaves_the_old_file_whole(tmp_path, name, args):
    old = bytes(range(256)) * 16  # 4 KiB under the cap; the new file is larger
    (tmp_path / name).write_bytes(old)
    done = _capped([*args, "--out", name], tmp_path, 20_000)
    assert done.returncode == 1 and "File too large" in done.stderr, done.stderr[-2000:]
    assert (tmp_path / name).read_bytes() == old  # was cut to 20,000 bytes of the new one
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left


def test_tlrmvm_compress_checks_the_npz_name_it_writes(tmp_path):
    (tmp_path / "op.npz").mkdir()
    refused_in_one_line(ROOT, ["hpc", "tlrmvm", "compress", "--n", "64", "--nb", "16", "--out",
                               tmp_path / "op"], "op.npz is a folder")  # fmt: skip
    os.symlink(tmp_path / "nowhere", tmp_path / "dl.npz")
    message = "dl.npz is a symbolic link that cannot be followed"
    refused_in_one_line(ROOT, ["hpc", "tlrmvm", "compress", "--n", "64", "--nb", "16", "--out",
                               tmp_path / "dl"], message)  # fmt: skip


def test_tlrmvm_compress_refuses_a_zero_matrix(tmp_path):
    np.save(tmp_path / "zero.npy", np.zeros((64, 64)))
    args = ["hpc", "tlrmvm", "compress", "--matrix", tmp_path / "zero.npy", "--nb", "16"]
    refused_in_one_line(ROOT, [*args, "--out", tmp_path / "z.npz"], "the operator is zero")
    assert not (tmp_path / "z.npz").exists()
    # entries of 1e-30 are no zero matrix, but their fp32 squares underflow: 0/0 was NaN
    np.save(tmp_path / "tiny.npy", np.full((16, 16), 1e-30))
    code, out = invoke(ROOT, ["hpc", "tlrmvm", "compress", "--matrix", tmp_path / "tiny.npy",
                              "--nb", "4", "--out", tmp_path / "t.npz"])  # fmt: skip
    assert code == 0 and "||A - A_tlr||_F / ||A||_F = 0.00e+00" in out, out


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--kernel", "nope", "--layout", "packed"], "unknown kernel 'nope'; use one of auto, pe"),
     (["--kernel", "pe", "--layout", "banded"], "kernel 'pe' applies to the grouped layout")],
)  # fmt: skip
def test_tlrmvm_run_refuses_a_kernel_the_layout_ignores(tmp_path, extra, message):
    op = tmp_path / "op.npz"
    code, out = invoke(ROOT, ["hpc", "tlrmvm", "compress", "--n", "64", "--nb", "16", "--out", op])
    assert code == 0, out
    refused_in_one_line(ROOT, ["hpc", "tlrmvm", "run", "--operator", op, "--preset", "tiny",
                               *extra], message)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [(["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--steps", "١٠"], {},
      "--steps must be an integer in [0, 2147483647], got ١٠"),
     (["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "４"], {},
      "--grid must be an integer >= 1, got ４"),
     ([*MD[:6], "--a", "３.６"], {}, "--a must be a finite number > 0 (A), got ３.６"),
     (["wafer", "info"], {"WSE_NUM_PROCESSES": "١"}, "WSE_NUM_PROCESSES must be"),
     (["hpc", "tlrmvm", "compress", "--n", "64", "--nb", "16", "--out", "x.npz"],
      {"WSE_HOST_MEMORY_BYTES": "١٠٠"}, "WSE_HOST_MEMORY_BYTES must be a number of bytes"),
     (["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--steps", "1"],
      {"WSE_LIMIT_TIME_STEPS": "١٠"}, "WSE_LIMIT_TIME_STEPS must be a positive integer"),
     (["plan", "train", "--model", "llama3-8b", "--tokens", "1e12", "--batch", "8",
       "--micro-batch", "٢"], {}, "--micro-batch must be auto, explore, none or a positive"),
     (["wafer", "info", "--set", "pe_rows=١٠"], {}, "pe_rows must be a number, got '١٠'"),
     (["experiments", "run", "wafer-yield", "--quick", "--assume", "fp32_mul_width=４"], {},
      "assumption fp32_mul_width must be a number, got '４'"),
     (["train", "tiny", "--validate-only", "model.vocab_size=３００"], {},
      "model.vocab_size must be a number in ASCII digits, got the text '３００'")],
    ids=["arabic-indic steps", "fullwidth grid", "fullwidth float", "env count", "env bytes",
         "env limit", "micro-batch", "--set", "--assume", "override advice"],
)  # fmt: skip
def test_numbers_are_ascii(tmp_path, monkeypatch, args, env, message):
    monkeypatch.chdir(tmp_path)
    refused_in_one_line(ROOT, args, message, env)


CFD = ["hpc", "cfd", "--preset", "small", "--grid", "16", "8", "1"]


def test_cfd_refuses_a_z_column_past_sram_before_building(tmp_path):
    message = "one field's Z column of 100,000,000 fp32 cells needs 400,000,000 B per PE"
    refused_in_one_line(ROOT, [*CFD[:5], "16", "8", "100000000"], message)


def test_cfd_step_files_are_bounded(tmp_path):
    args = [*CFD, "--steps", "3000000", "--output-every", "1", "--out", tmp_path / "run"]
    refused_in_one_line(ROOT, args, "is 3,000,001, over the limit of 10,000 step files")
    assert not (tmp_path / "run").exists()


def test_cfd_never_mixes_two_runs_in_one_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "step_0000005.npz").write_bytes(b"first run's")
    refused_in_one_line(ROOT, [*CFD, "--steps", "3", "--out", run],
                        "holds another run's step files (the newest step_0000005.npz); give "
                        "--restart")  # fmt: skip
    assert sorted(p.name for p in run.iterdir()) == ["step_0000005.npz"]


def test_a_setfl_of_many_tiny_tables_is_read_in_linear_time(tmp_path):
    # hunt 61: each table summed the rest of the file first (1,000 elements of 5-point
    # tables, a 5 MB file: past a minute); a line listed every element of the file
    ne = 300
    lines = ["c", "c", "c", f"{ne} " + " ".join(f"E{i}" for i in range(ne)), "5 0.1 5 0.5 1.9"]
    lines += ["1 1.0 3.6 fcc", "0 0 0 0 0", "1 1 1 1 1"] * ne
    lines += ["0 0 0 0 0"] * (ne * (ne + 1) // 2)
    (tmp_path / "many.eam.alloy").write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    message = "no parameters for Cu (it has E0, E1, E2, E3, E4, ... (300 in all))"
    refused_in_one_line(ROOT, [*MD, "--potential", tmp_path / "many.eam.alloy"], message)
    assert time.perf_counter() - t0 < 10  # 0.3 s here


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["hpc", "md", "--structure", "", "--potential", "x.eam.alloy"], "--structure is empty"),
        ([*MD, "--potential", ""], "--potential is empty; give a file or folder name"),
        ([*MD, "--potential=", "--steps", "1"], "--potential is empty"),
        (["wafer", "info", "--spec", ""], "--spec is empty; give a file or folder name"),
        (["hpc", "tlrmvm", "run", "--operator", ""], "--operator is empty"),
        (["infer", "generate", "--model-dir", "", "--prompt", "x"], "--model-dir is empty"),
        (["infer", "serve", "--model-dir", ""], "--model-dir is empty ('')"),
        (["plan", "train", "--model", "", "--tokens", "1e12"], "--model is empty ('')"),
        (["train", "", "--validate-only"], "the params file is empty text ('')"),
    ],
    ids=["structure", "potential", "potential=", "spec", "operator", "generate", "serve",
         "plan", "train"],
)  # fmt: skip
def test_an_empty_input_path_is_named_not_read_as_the_current_folder(args, message):
    # hunt 61: click reads '' as '.': "structure file '.' is a folder", "'.' is neither an
    # HF-format directory", "cannot read HF config 'config.json': [Errno 2] ..."
    refused_in_one_line(ROOT, args, message)


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--out", "p5.txt"], "--out p5.txt: wse reads a setfl by its name"),
     (["Ni", "Al", "Fe", "Ag", "Au", "Pd", "Pt", "Pb", "W", "Mo", "Ta", "Co", "Ti", "Zr", "Mg",
       "--knots", "100000", "--out", "p.eam.alloy"],
      "the size of a setfl of 16 elements, 100,000 knots is 403,200,000, over the limit of "
      "67,108,864 bytes")],
    ids=["name read as funcfl", "past file_bytes"],
)  # fmt: skip
def test_md_potential_writes_only_what_md_reads_back(tmp_path, monkeypatch, extra, message):
    # hunt 61: p5.txt was written, then read as funcfl ("'X.' is not an integer"); 16
    # elements at 100,000 knots wrote 397 MB in 15 s, past what --potential reads
    monkeypatch.chdir(tmp_path)
    refused_in_one_line(ROOT, ["hpc", "md", "potential", "--elements", "Cu", *extra], message)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--model", "nope"], "refused every request (HTTP 404: The model 'nope' does not exist"),
     (["--max-tokens", "100000"], "refused every request (HTTP 400: This model's maximum "
      "context length is 256 tokens. However, you requested 100022 tokens")],
    ids=["unknown model", "past the context"],
)  # fmt: skip
def test_infer_bench_whose_every_request_is_refused_says_why(tmp_path, extra, message):
    # hunt 61: each refusal was printed (cut at 200 bytes, mid-JSON), a JSON of nothing was
    # saved and the bench exited 0
    from wse_inference.serve.testing import running_server

    out = tmp_path / "bench.json"
    with running_server() as server:
        args = ["infer", "bench", "--url", server.http_url, "-n", "2", "--out", out, *extra]
        refused_in_one_line(ROOT, args, message)
    assert not out.exists()


def test_infer_bench_refuses_an_empty_prompt_before_connecting():
    refused_in_one_line(ROOT, ["infer", "bench", "--url", "http://127.0.0.1:9", "--prompt", ""],
                        "--prompt is empty; give the text each request sends")  # fmt: skip


def test_md_out_keeps_an_existing_trajectory_until_the_run_ends(tmp_path, monkeypatch, cu):
    # hunt 61: the first frame truncated an existing --out; a run stopped after it (a
    # refusal, Ctrl-C, a kill) left one frame where a whole trajectory was
    import wse_hpc.md.simulate as simulate
    from wse_core.errors import WseError

    def stopped(s, pot, cfg, on_thermo=None, on_frame=None):
        on_frame(0, s)  # the first frame is written, then the run is stopped
        raise WseError("stopped after the first frame")

    old = tmp_path / "traj.xyz"
    old.write_text("a whole trajectory\n")
    monkeypatch.setattr(simulate, "run_md", stopped)
    refused_in_one_line(ROOT, [*MD, "--potential", cu, "--steps", "2", "--out", old],
                        "stopped after the first frame")  # fmt: skip
    assert old.read_text() == "a whole trajectory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traj.xyz"]


def test_train_refuses_a_jsonl_line_nested_past_json_depth_before_the_run_folder(tmp_path):
    # hunt 61: pyarrow's JSON reader crashed the process (a segmentation fault, exit -11)
    # on a line 100,000 levels deep, after the run folder was made
    docs = tmp_path / "docs"
    docs.mkdir()
    line = '{"text": "the wafer streams weights ' + "x" * 500 + '"}\n'
    (docs / "a.jsonl").write_text(line * 20 + '{"a":' * 100_000 + "1" + "}" * 100_000 + "\n")
    args = ["train", "tiny", "runconfig.max_steps=2", "runconfig.mode=train",
            "model.vocab_size=300", "train_input.batch_size=2", "runconfig.sample_tokens=0",
            f"train_input.data_dir={docs}", "-o", tmp_path / "run"]  # fmt: skip
    refused_in_one_line(ROOT, args, "a.jsonl' nests JSON 100,000 levels deep (before byte")
    assert not (tmp_path / "run").exists()


def test_train_refuses_a_jsonl_record_of_too_many_fields_before_the_run_folder(tmp_path):
    # hunt 61: one record of 200,000 fields (HF datasets makes a column of each) loaded for
    # 61 s before training; a line of nested fields (a colon at depth 2) counts one field
    docs = tmp_path / "docs"
    docs.mkdir()
    line = '{"text": "the wafer streams weights ' + "x" * 500 + '", "meta": {"a": 1, "b": 2}}\n'
    wide = "{" + ", ".join(f'"k{i}": {i}' for i in range(20_000)) + ', "text": "w"}\n'
    (docs / "a.jsonl").write_text(line * 2 + wide + line * 20)
    args = ["train", "tiny", "runconfig.max_steps=2", "runconfig.mode=train",
            "model.vocab_size=300", "train_input.batch_size=2", "runconfig.sample_tokens=0",
            f"train_input.data_dir={docs}", "-o", tmp_path / "run"]  # fmt: skip
    t0 = time.perf_counter()
    refused_in_one_line(ROOT, args, "a.jsonl' has a record of 20,001 fields (line 3), over the "
                        "limit of 10,000 (set WSE_LIMIT_JSON_FIELDS to lift it)")  # fmt: skip
    assert time.perf_counter() - t0 < 10
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [({"nb": np.float64(16.5)}, "nb must be one integer, got float64 of shape ()"),
     ({"nb": np.array([16, 16])}, "nb must be one integer, got int64 of shape (2,)"),
     ({"shape": np.array([64.5, 64.0])}, "shape or ranks have the wrong form"),
     ({"error_fro": np.float64("inf")}, "error_fro must be a finite number >= 0, got inf")],
    ids=["nb 16.5", "nb of two", "shape 64.5", "error inf"],
)  # fmt: skip
def test_tlrmvm_run_refuses_an_operator_of_fractional_sizes(tmp_path, change, message):
    # hunt 61: nb 16.5 and a shape of 64.5 were truncated and run, error_fro inf printed as
    # the operator's error, an nb of two values was numpy's own words
    op = tmp_path / "op.npz"
    code, out = invoke(ROOT, ["hpc", "tlrmvm", "compress", "--n", "64", "--nb", "16", "--out", op])
    assert code == 0, out
    with np.load(op) as f:
        data = {k: f[k] for k in f.files}
    np.savez(tmp_path / "bad.npz", **{**data, **change})
    refused_in_one_line(ROOT, ["hpc", "tlrmvm", "run", "--operator", tmp_path / "bad.npz",
                               "--preset", "tiny"], message)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [({"rms_norm_eps": 1e308}, "rms_norm_eps must be a finite number > 0 within fp32"),
     ({"rope_theta": 1e308, "rope_parameters": {"rope_type": "default", "rope_theta": 1e308}},
      "rope_theta must be a finite number > 0 within fp32 (3.4e38), got 1e+308")],
    ids=["rms_norm_eps", "rope_theta"],
)  # fmt: skip
def test_a_model_config_number_past_fp32_is_refused(tmp_path, change, message):
    # hunt 61: both ran, with JAX's "overflow encountered in cast" warnings on stderr

    from wse_inference.testing import save_tiny_model

    save_tiny_model(tmp_path / "m", n_layers=1)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, **change}))
    refused_in_one_line(ROOT, ["infer", "generate", "--model-dir", tmp_path / "m",
                               "--prompt-ids", "1,2", "--max-tokens", "2"], message)  # fmt: skip


def test_a_rerun_into_the_same_experiment_folder_says_it_replaced_the_results(tmp_path):
    """hunt 61: `experiments run NAME --out DIR` twice replaced DIR/NAME's results without a
    word; the second run now says so (on stderr, after its table) and still writes them."""

    args = ["experiments", "run", "wafer-yield", "--quick", "--out", tmp_path]
    code, first = invoke(ROOT, args)
    assert code == 0 and "held an earlier run" not in first
    results = tmp_path / "wafer-yield" / "results.json"
    os.utime(results, (0, 0))  # the first run's file, as written long ago
    code, second = invoke(ROOT, args)
    assert code == 0, second
    line = f"note: {tmp_path / 'wafer-yield'} held an earlier run's results (written 1970-01-01"
    assert line in second and "its files are replaced by this run's" in second
    assert results.stat().st_mtime > 0 and json.loads(results.read_text())["experiment"]


def test_the_bench_never_prints_the_urls_password(tmp_path):
    """hunt 61: `infer bench --url http://user:secret@host:port` echoed the password in its
    error (and would in its table and JSON); it is shown as ****, as pip and curl show it."""
    import socket

    with socket.socket() as s:  # a port with no server: nothing listens once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://alice:s3cr3t-pw@127.0.0.1:{port}"
    code, out = invoke(ROOT, ["infer", "bench", "--url", url, "-n", "1",
                              "--out", tmp_path / "b.json"])  # fmt: skip
    assert code == 2 and "s3cr3t" not in out, out
    assert f"cannot reach http://alice:****@127.0.0.1:{port}" in out
    assert not (tmp_path / "b.json").exists()
