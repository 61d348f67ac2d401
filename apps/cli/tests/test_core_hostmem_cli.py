"""Every command that sizes a problem refuses one the host cannot hold before allocating it:
exit 2, one line with the bytes needed, the bytes available and what would fit. The budget
is set small with WSE_HOST_MEMORY_BYTES (a machine's share), so the refusals are exact."""

import json
import re

import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_core import preset

MIB = 2**20


def _refused(args, budget_bytes=None):
    env = {"WSE_DEVICES": "8"}
    if budget_bytes is not None:
        env["WSE_HOST_MEMORY_BYTES"] = str(budget_bytes)
    r = CliRunner(env=env).invoke(app, [str(a) for a in args])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and "Traceback" not in line, line
    return line


def _numbers(line):
    need = int(re.search(r"\(([\d,]+) B\) but", line).group(1).replace(",", ""))
    avail = int(re.search(r"\(([\d,]+) B\) is available", line).group(1).replace(",", ""))
    return need, avail


def test_md_cells_beyond_the_wafer_are_refused_before_the_crystal_is_built(tmp_path):
    # the example: 32e9 atoms used to die in NumPy's allocator with a traceback
    pot = tmp_path / "X"
    pot.write_text("")
    args = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615"]
    line = _refused([*args, "--cells", 2000, 2000, 2000, "--potential", pot, "--steps", 1])
    assert "32,000,000,000 atoms need 32,000,000,000 PEs" in line and "896,112" in line


def test_md_cells_beyond_the_host_are_refused_with_the_cube_that_fits(tmp_path):
    from wse_hpc.md.sizing import crystal_bytes, state_bytes

    pot = tmp_path / "X"
    pot.write_text("")
    args = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615"]
    line = _refused([*args, "--cells", 20, 20, 20, "--potential", pot], budget_bytes=MIB)
    need, avail = _numbers(line)
    assert (
        need == crystal_bytes("fcc", (20, 20, 20)) + state_bytes(32000, "float32", preset("wse3"))
        and avail == MIB
    )
    side = int(re.search(r"at most --cells (\d+) \1 \1 fit", line).group(1))
    fits = lambda k: (
        crystal_bytes("fcc", (k,) * 3) + state_bytes(4 * k**3, "float32", preset("wse3"))
    )  # noqa: E731
    assert fits(side) <= MIB < fits(side + 1)


def test_stencil_grid_beyond_the_host_is_refused():
    from wse_cli.commands.hpc_stencil import host_bytes

    line = _refused(["hpc", "stencil", "--kind", "jacobi", "--grid", 64, 64, 64], 2 * MIB)
    need, _ = _numbers(line)
    assert need == host_bytes("jacobi", (64, 64, 64), "fp32") == 64**3 * (48 + 24)
    nz = int(re.search(r"at most --grid 64 64 (\d+) fits", line).group(1))
    assert host_bytes("jacobi", (64, 64, nz), "fp32") <= 2 * MIB
    assert host_bytes("jacobi", (64, 64, nz + 1), "fp32") > 2 * MIB


def test_tlrmvm_n_beyond_the_host_is_refused(tmp_path):
    from wse_cli.commands.hpc_tlrmvm import compress_host_bytes

    out = tmp_path / "op.npz"
    line = _refused(["hpc", "tlrmvm", "compress", "--n", 4096, "--out", out], 64 * MIB)
    need, _ = _numbers(line)
    assert need == compress_host_bytes(4096) and not out.exists()
    n = int(re.search(r"at most --n (\d+) fits", line).group(1))
    assert compress_host_bytes(n) <= 64 * MIB < compress_host_bytes(n + 1)


def test_train_batch_beyond_the_host_is_refused_before_anything_is_written(tmp_path):
    line = _refused(
        ["train", "tiny", "train_input.batch_size=4096", "-o", tmp_path / "run"], 256 * MIB
    )
    assert "training batch 4096 x" in line and "at most train_input.batch_size=" in line
    assert not (tmp_path / "run").exists()


def test_generate_and_serve_refuse_a_cache_beyond_the_host(tiny_model_dir):
    from wse_inference.host_memory import serving_host_bytes
    from wse_inference.model_dir import read_config

    cfg = read_config(tiny_model_dir)
    budget = serving_host_bytes(cfg, rows=1, max_context=cfg.max_seq_len)  # one row fits
    gen = ["infer", "generate", "--model_dir", tiny_model_dir, "--prompt-ids", "1,2", "--stages", 2]
    line = _refused(gen, budget)
    need, avail = _numbers(line)
    assert need == serving_host_bytes(cfg, rows=2, max_context=cfg.max_seq_len)
    assert avail == budget and f"at most 1 rows of context {cfg.max_seq_len}" in line
    spec = json.dumps({"model": str(tiny_model_dir), "num_speculative_tokens": 2})
    serve = ["infer", "serve", "--model_dir", tiny_model_dir, "--max-num-seqs", 8]
    line = _refused([*serve, "--speculative-config", spec, "--port", 0], budget)
    assert "serving 8 slots (8 KV-cache rows)" in line
    assert _numbers(line)[0] == serving_host_bytes(cfg, rows=8, max_context=cfg.max_seq_len)


@pytest.mark.parametrize("kind", ["jacobi", "bicgstab"])
def test_stencil_estimate_counts_the_manufactured_solution_as_built(kind):
    import tracemalloc

    from wse_cli.commands.hpc_stencil import EXACT_BYTES_PER_CELL
    from wse_core import preset
    from wse_hpc.stencil.placement import place_grid
    from wse_hpc.stencil.runs import StencilConfig, _setup, exact_solution

    cfg = StencilConfig(kind=kind, grid=(20, 24, 30), spec=preset("small"))
    grid = place_grid(_setup(cfg), cfg.grid, {"u": "fp32"})
    tracemalloc.start()
    try:
        ue = exact_solution(grid, kind)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0.9 <= EXACT_BYTES_PER_CELL * ue.size / peak <= 1.25


# --- every suggestion is itself an input the command accepts (issue 31) -----------------
def _accepted(args, budget_bytes):
    env = {"WSE_DEVICES": "8", "WSE_HOST_MEMORY_BYTES": str(budget_bytes)}
    r = CliRunner(env=env).invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, (args, r.output[-2000:])


def _grid(line):
    """The grid the message suggests (the last --grid in it; the first is the one asked)."""
    return [int(v) for v in re.findall(r"--grid (\d+) (\d+) (\d+)", line)[-1]]


@pytest.mark.parametrize(
    ("kind", "grid", "extra"),
    [
        ("heat", (100000, 100000, 100000), []),  # the issue's: it suggested --grid 100000 100000 0
        ("jacobi", (64, 64, 64), []),
        ("heat", (700, 900, 10**8), []),
        ("wave25", (64, 64, 64), ["--block-z", 4]),
    ],
)
def test_each_stencil_suggestion_runs(kind, grid, extra):
    budget = 4 * MIB
    line = _refused(["hpc", "stencil", "--kind", kind, "--grid", *grid, *extra], budget)
    suggested = _grid(line)
    assert min(suggested) >= 1, line
    if extra:
        assert suggested[2] % 4 == 0, line
    _accepted(["hpc", "stencil", "--kind", kind, "--grid", *suggested, *extra, "--steps", 1,
               "--json"], budget)  # fmt: skip


def test_the_tlrmvm_suggestion_runs(tmp_path):
    budget = 2 * MIB
    line = _refused(["hpc", "tlrmvm", "compress", "--n", 4096, "--out", tmp_path / "a"], budget)
    n = int(re.search(r"at most --n (\d+) fits", line).group(1))
    _accepted(["hpc", "tlrmvm", "compress", "--n", n, "--nb", 64, "--out", tmp_path / "b"], budget)


@pytest.mark.slow
def test_the_md_suggestion_runs(tmp_path):
    pot = tmp_path / "Cu.eam.alloy"
    _accepted(["hpc", "md", "potential", "--elements", "Cu", "--out", pot], MIB)
    md = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--potential", pot]
    line = _refused([*md, "--cells", 20, 20, 20], MIB)
    side = int(re.search(r"at most --cells (\d+) \1 \1 fit", line).group(1))
    _accepted([*md, "--cells", side, side, side], MIB)


def test_train_and_serve_suggestions_pass_their_checks(tmp_path, tiny_model_dir, monkeypatch):
    from wse_cli.commands.train import _check_host_memory
    from wse_inference.host_memory import check_host_memory
    from wse_inference.model_dir import read_config
    from wse_trainer.config import load_config

    budget = 256 * MIB
    line = _refused(["train", "tiny", "train_input.batch_size=4096", "-o", tmp_path], budget)
    monkeypatch.setenv("WSE_HOST_MEMORY_BYTES", str(budget))
    b, seq = re.search(r"batch_size=(\d+) at max_sequence_length=(\d+)", line).groups()
    s, b0 = re.search(r"max_sequence_length=(\d+) at batch_size=(\d+)", line).groups()
    for over in ([f"train_input.batch_size={b}"], [f"train_input.max_sequence_length={s}",
                                                    f"train_input.batch_size={b0}"]):  # fmt: skip
        _check_host_memory(load_config("tiny", over))  # raises HostMemoryError if not
    cfg = read_config(tiny_model_dir)
    rows_budget = 3 * 2**20 + 4 * int(cfg.num_params())
    monkeypatch.setenv("WSE_HOST_MEMORY_BYTES", str(rows_budget))
    with pytest.raises(Exception, match="at most") as e:
        check_host_memory(cfg, rows=10**6, max_context=cfg.max_seq_len, what="x")
    found = re.search(r"at most (\d+) rows of context (\d+)", str(e.value))
    if found:
        check_host_memory(cfg, rows=int(found[1]), max_context=int(found[2]), what="x")
    found = re.search(r"context (\d+) with (\d+) rows", str(e.value))
    if found:
        check_host_memory(cfg, rows=int(found[2]), max_context=int(found[1]), what="x")
