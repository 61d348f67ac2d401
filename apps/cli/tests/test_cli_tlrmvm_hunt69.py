"""Hunt 69's `wse hpc tlrmvm` holes (notes/s69/hunt69_tlr.md). Broken before:
- `compress --threshold 1e-9` (below fp32's reach) wrote its operator, exit 0, printing an
  error 137x the threshold, and `run` then showed the file's 0.00e+00;
- the file held the SVDs' dropped tail, not the achieved error compress printed (`--json`
  carried both, 0.0 and 1.3e-07);
- `run --json` of a file without `error_fro` printed `NaN` three times (no JSON);
- `run` showed a recorded error 500x its threshold, a threshold of 5e-324 and a zero
  operator's "compression 32768x"; a `format` of 1.5 or '1' ran; a complex threshold was
  refused in Python's words;
- `--nb 1` (1,048,576 tiles) ran past 120 s; a 65,536-tile file planned for 2 minutes;
- `--matrix` was estimated at 24 B a value and peaked at ~60 (a 100 MB cap was accepted,
  peaking at 245 MB);
- `--batch 200` / `--rank-chunk 10**9` were refused naming 'tlrmvm.vectors' / 'tlrmvm.vh';
- every numeric option read '1_0' as 10 (`--threshold 1_0e-3` was 0.01);
- `--matrix UP.NPY` was "not a .npy file"; a bfloat16 .npy was "got dtype |V2".
Oracles: NumPy's dense rebuild of the written operator, strict JSON parsing, the exact
refusal line with nothing written, the process's own peak memory (VmHWM).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.options import NUMBER_MARK
from wse_cli.testing import invoke, refused_in_one_line, walk_commands
from wse_hpc.tlrmvm import load_operator

ROOT = typer.main.get_command(app)
TLR = ["hpc", "tlrmvm"]


def _random(path, n: int = 100, dtype=np.complex128):
    r = np.random.default_rng(0)
    np.save(path, (r.standard_normal((n, n)) + 1j * r.standard_normal((n, n))).astype(dtype))
    return path


def _numpy_error(op, a) -> float:
    """||A - A_tlr||_F / ||A||_F with A_tlr rebuilt by NumPy from the written file, float64;
    A as the operator holds it (complex64)."""
    wide = np.asarray(a, np.complex64).astype(np.complex128)
    return float(np.linalg.norm(op.dense().astype(np.complex128) - wide) / np.linalg.norm(wide))


# -- 1, 2: the threshold floor, the achieved error in the file and in `run` ------------------
def test_a_threshold_below_fp32s_reach_is_refused_up_front(tmp_path):
    line = (
        "--threshold 1e-09 is below 2e-06, the least an fp32 operator can certify (rounding its "
        "tiles to fp32 alone costs up to 9.5e-07 of ||A||_F): give --threshold 2e-06 or more"
    )
    for value, shown in (("1e-9", "1e-09"), ("1e-320", "1e-320")):
        args = [*TLR, "compress", "--n", 64, "--nb", 16, "--threshold", value,
                "--out", tmp_path / "t.npz"]  # fmt: skip
        refused_in_one_line(ROOT, args, line.replace("1e-09", shown))
    assert list(tmp_path.iterdir()) == []


def test_the_file_and_run_carry_the_achieved_error(tmp_path):
    matrix = _random(tmp_path / "c.npy")
    out = tmp_path / "c.npz"
    code, text = invoke(ROOT, [*TLR, "compress", "--matrix", matrix, "--nb", 16,
                               "--threshold", "2e-6", "--threshold-rule", "tile", "--out", out,
                               "--json"])  # fmt: skip
    assert code == 0, text
    d = json.loads(text)
    op = load_operator(out)
    truth = _numpy_error(op, np.load(matrix))
    assert 1e-8 < truth <= 2e-6  # full rank: fp32 rounding, not 0
    assert d["error_fro"] == d["frobenius_rel_error"] == op.error_fro  # one figure
    assert op.error_fro == pytest.approx(truth, rel=1e-3)
    code, text = invoke(ROOT, [*TLR, "run", "--operator", out, "--preset", "tiny"])
    assert code == 0, text
    assert text.splitlines()[0].endswith(
        f"threshold 2e-06, ||A - A_tlr||_F / ||A||_F {op.error_fro:.2e} (achieved, from compress)"
    )


# -- 3, 4, 9: what `run` reads from a file ---------------------------------------------------
@pytest.fixture(scope="module")
def operator(tmp_path_factory):
    out = tmp_path_factory.mktemp("op") / "op.npz"
    args = [*TLR, "compress", "--n", 64, "--nb", 16, "--threshold-rule", "tile", "--out", out]
    code, text = invoke(ROOT, args)
    assert code == 0, text
    with np.load(out) as f:
        return out, {k: f[k] for k in f.files}


def _forged(operator, name, drop=(), **change):
    path, data = operator
    data = {k: v for k, v in {**data, **change}.items() if k not in drop}
    np.savez(path.parent / name, **data)
    return path.parent / name


def test_run_json_of_a_file_without_its_error_is_strict_json(operator):
    old = _forged(operator, "noerr.npz", drop=("error_fro",))
    code, text = invoke(ROOT, [*TLR, "run", "--operator", old, "--preset", "tiny", "--json"])
    assert code == 0, text[-2000:]

    def no_constant(name):
        raise AssertionError(f"{name} in the JSON")

    d = json.loads(text, parse_constant=no_constant)
    for where in (d, d["predicted"], d["predicted_48_systems"]):  # NaN in all three, before
        assert where["operator"]["error_fro"] is None
    assert "NaN" not in text


@pytest.mark.parametrize(
    ("change", "why"),
    [({"error_fro": np.float64(0.5)},
      "is corrupt: its recorded error 0.5 is above its threshold 0.001 (compress never writes "
      "that)"),
     ({"threshold": np.float64(5e-324)},
      "is corrupt: threshold 5e-324 is below 2e-06, the least an fp32 operator can certify"),
     ({"threshold": np.complex128(1e-3)},
      "is corrupt: threshold must be one real number, got complex128")],
    ids=["error above threshold", "threshold 5e-324", "complex threshold"],
)  # fmt: skip
def test_run_refuses_figures_compress_never_writes(operator, change, why):
    bad = _forged(operator, "bad.npz", **change)
    args = [*TLR, "run", "--operator", bad, "--preset", "tiny"]
    refused_in_one_line(ROOT, args, f"TLR operator file {str(bad)!r} {why}")


def test_run_refuses_a_zero_operator_and_a_fractional_format(operator):
    _, data = operator
    zero = _forged(operator, "zero.npz", ranks=np.zeros_like(data["ranks"]),
                   u=np.zeros(0, data["u"].dtype), v=np.zeros(0, data["v"].dtype))  # fmt: skip
    refused_in_one_line(ROOT, [*TLR, "run", "--operator", zero, "--preset", "tiny"],
                        "is corrupt: the operator is zero (all its ranks are 0)")  # fmt: skip
    for fmt in (np.float64(1.5), np.array("1")):
        bad = _forged(operator, "fmt.npz", format=fmt)
        refused_in_one_line(ROOT, [*TLR, "run", "--operator", bad, "--preset", "tiny"],
                            f"{str(bad)!r} is not a TLR operator file")  # fmt: skip


# -- 5: tiles ----------------------------------------------------------------------------------
def test_too_many_tiles_are_refused_up_front(tmp_path):
    refused_in_one_line(
        ROOT, [*TLR, "compress", "--nb", 1, "--out", tmp_path / "big.npz"],
        "--nb 1 cuts the 1024 x 1024 operator into 1,048,576 tiles, over the limit of 100,000 "
        "(an SVD each; set WSE_LIMIT_TLR_TILES to lift it): give --nb 4 or more",
    )  # fmt: skip
    np.save(tmp_path / "m.npy", np.ones((500, 400), np.float32))
    refused_in_one_line(
        ROOT, [*TLR, "compress", "--matrix", tmp_path / "m.npy", "--nb", 1, "--out",
               tmp_path / "m.npz"], "--nb 1 cuts the 500 x 400 operator into 200,000 tiles",
    )  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npy"]


# -- 6: host memory ----------------------------------------------------------------------------
def test_a_matrix_file_is_priced_at_what_compress_peaks_at(tmp_path):
    """1000 x 1000 complex128 (16 MB): 24 B a value (24 MB) was asked, so a 25 MB cap let
    through a command that peaks well above it."""
    from wse_hpc.tlrmvm.compress import compress_host_bytes

    matrix = _random(tmp_path / "c.npy", 1000)
    need = compress_host_bytes((1000, 1000), 125, complex_=True, read_itemsize=16)
    assert need > 32 * 1000 * 1000  # the matrix, its full-rank bases and what the heap keeps
    args = [*TLR, "compress", "--matrix", matrix, "--nb", 125, "--out", tmp_path / "o.npz"]
    refused_in_one_line(ROOT, args, f"MiB of host memory ({need:,} B) but 23.8 MiB",
                        env={"WSE_HOST_MEMORY_BYTES": "25000000"})  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npy"]


# The peak is VmHWM, this process's own (ru_maxrss survives exec: a child of a test process
# that ran JAX would report the parent's), less the RSS after a first, tiny compress: the
# command's imports and BLAS's own buffers are the process's, not the matrix's.
MEASURE = textwrap.dedent(
    """
    import sys
    import typer
    from wse_cli.app import app

    def kib(field):
        line = next(x for x in open("/proc/self/status") if x.startswith(field))
        return int(line.split()[1]) * 1024

    cmd = typer.main.get_command(app)
    tiny, warm, *args = sys.argv[1:]
    cmd.main(["hpc", "tlrmvm", "compress", "--matrix", tiny, "--nb", "4", "--out", warm],
             standalone_mode=False)
    before = kib("VmRSS:")
    cmd.main(args, standalone_mode=False)
    print("PEAK", kib("VmHWM:") - before)
    """
)


def test_the_estimate_covers_the_measured_peak_at_full_rank(tmp_path):
    from wse_hpc.tlrmvm.compress import compress_host_bytes

    matrix = _random(tmp_path / "c.npy", 1200, np.complex64)
    np.save(tmp_path / "tiny.npy", np.eye(16, dtype=np.float32) + 1)
    args = [*TLR, "compress", "--matrix", str(matrix), "--nb", "100", "--threshold", "2e-6",
            "--out", str(tmp_path / "o.npz")]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(tmp_path / "tiny.npy"), str(tmp_path / "w.npz"),
         *args], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    peak = int(done.stdout.rsplit("PEAK", 1)[1])
    need = compress_host_bytes((1200, 1200), 100, complex_=True, read_itemsize=8)
    assert "ranks mean 100.0" in done.stdout  # full rank: the most bases
    assert 0.6 * need < peak <= need, (peak, need)  # measured 0.89 of it


# -- 8: SRAM -------------------------------------------------------------------------------------
def test_a_batch_over_sram_names_the_option_and_what_fits(operator):
    from wse_core import preset
    from wse_core.errors import SramBudgetError
    from wse_hpc.tlrmvm.grouped_plan import plan_grouped
    from wse_hpc.tlrmvm.perf import product_s

    path, _ = operator
    code = preset("wse2").code_stack_bytes_per_pe  # hunt 81: the program's, not data's
    line = refused_in_one_line(
        ROOT, [*TLR, "run", "--operator", path, "--batch", 200],
        "--batch 200 needs 59,456 B of SRAM per PE for its vectors and the bases but a wse2 PE "
        f"has {49152 - code:,} B (of the 49152 B a PE holds, {code} B are its program's code "
        "and stack, assumed: code_stack_bytes_per_pe): at most --batch ",
    )  # fmt: skip
    # the batch named is the largest the planner places (hunt 81: 165 when the program's
    # code and stack were data's too)
    best = int(line.rsplit("at most --batch ", 1)[1].split()[0])
    op, wse2 = load_operator(path), preset("wse2")
    assert plan_grouped(op, wse2, price=product_s, batch=best).batch == best
    with pytest.raises(SramBudgetError):
        plan_grouped(op, wse2, price=product_s, batch=best + 1)


# -- 10: digit grouping ------------------------------------------------------------------------
def test_underscores_in_numbers_are_refused_by_every_numeric_option():
    checked = 0
    for _, cmd in walk_commands(ROOT):
        for p in cmd.params:
            if getattr(p.callback, NUMBER_MARK, None) is None:
                continue
            parse = p.type_descriptor.parameter_info.parser  # typer's: what `number` gave it
            for text in ("1_0", "1_0e-3", "1e1_0"):  # float() and Decimal() read them all
                assert type(parse(text)).__name__ == "_NotANumber", (p.opts, text)
            assert parse("10") == 10
            checked += 1
    assert checked > 50


def test_a_grouped_threshold_is_refused_not_read_as_ten_times_it(tmp_path):
    for option, value, wanted in (("--threshold", "1_0e-3", "a finite number in (0, 1)"),
                                  ("--nb", "1_6", "an integer >= 1")):  # fmt: skip
        args = [*TLR, "compress", "--n", 64, option, value, "--out", tmp_path / "u.npz"]
        refused_in_one_line(ROOT, args, f"Error: {option} must be {wanted}, got {value}")
    assert list(tmp_path.iterdir()) == []


# -- 11: file names and bfloat16 -----------------------------------------------------------------
def test_an_upper_case_npy_is_read_and_a_bfloat16_one_named(tmp_path):
    a = np.eye(16) + 1.0
    with open(tmp_path / "UP.NPY", "wb") as f:  # np.save would add ".npy"
        np.save(f, a)
    code, text = invoke(ROOT, [*TLR, "compress", "--matrix", tmp_path / "UP.NPY", "--nb", 4,
                               "--out", tmp_path / "up.npz"])  # fmt: skip
    assert code == 0, text
    assert _numpy_error(load_operator(tmp_path / "up.npz"), a) <= 1e-3
    np.save(tmp_path / "bf.npy", np.zeros((16, 16), "V2"))  # ml_dtypes' bfloat16 on disk
    refused_in_one_line(
        ROOT, [*TLR, "compress", "--matrix", tmp_path / "bf.npy", "--nb", 4, "--out",
               tmp_path / "bf.npz"],
        "it holds bare 2-byte values (dtype |V2), as NumPy saves a bfloat16 array (JAX, "
        "ml_dtypes); save it as float32",
    )  # fmt: skip
    assert not (tmp_path / "bf.npz").exists()
