"""Sizes past their limit, outputs that cannot be written, non-finite numbers in files.

Generated from the commands themselves, as test_cli_hostile_input reads every numeric option:
every output option (declared with `wse_cli.outputs`) is given a folder, a path under a file
and a path in a folder nobody may write; every numeric option with a size limit is given one
past it, then the same with the limit lifted by its variable. The issue's cases run as real
processes whose tree's resident memory is watched (`wse_cli.testing.run_watched`: killed past
1 GiB), each expected to exit 2 with one line and leave nothing on disk."""

from __future__ import annotations

import inspect
import os
import tempfile
import typing
from pathlib import Path

import numpy as np
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from wse_cli.app import app
from wse_cli.option_names import OUTPUT_MARK
from wse_cli.options import NUMBER_MARK
from wse_cli.testing import (
    NO_JAX_PROBE,
    RSS_CAP,
    alias_bomb_yaml,
    bomb_trace,
    clean_env,
    deep_model_dir,
    invoke,
    run_watched,
    walk_commands,
)
from wse_core.host.limits import LIMITS, limit

ROOT = typer.main.get_command(app)


def _invoke(args: list, env: dict[str, str] | None = None) -> tuple[int, str]:
    return invoke(ROOT, args, env)


def _commands():
    return walk_commands(ROOT)


def _annotation(cmd, param):
    if cmd.callback is None:
        return None
    return typing.get_type_hints(inspect.unwrap(cmd.callback)).get(param.name)


OUTPUTS = [
    (path, p) for path, cmd in _commands() for p in cmd.params if hasattr(p.callback, OUTPUT_MARK)
]
OUT_IDS = [" ".join((*path, p.opts[0])) for path, p in OUTPUTS]
LIMITED = [
    (path, p)
    for path, cmd in _commands()
    for p in cmd.params
    if getattr(getattr(p.callback, NUMBER_MARK, None), "limit", None)
]
LIM_IDS = [" ".join((*path, p.opts[0])) for path, p in LIMITED]


def test_every_output_option_is_checked_at_parsing():
    """Every Path option named like an output (--out, --png, --trace, --model-dir of train)
    is declared with wse_cli.outputs; the issue's 17 commands are among them."""
    named = [
        " ".join((*path, p.opts[0]))
        for path, cmd in _commands()
        for p in cmd.params
        if _annotation(cmd, p) is Path and p.opts[0] in ("--out", "--png", "--trace")
    ]
    assert set(named) <= set(OUT_IDS), set(named) - set(OUT_IDS)
    assert len(OUTPUTS) >= 17, OUT_IDS


def _args(path, param, value) -> list[str]:
    return [*path, param.opts[0], str(value)]


@pytest.mark.parametrize(("path", "param"), OUTPUTS, ids=OUT_IDS)
@settings(max_examples=3, deadline=None)
@given(kind=st.sampled_from(["folder", "under a file", "unwritable"]))
def test_an_unwritable_output_is_one_line_exit_2_and_nothing_is_made(path, param, kind):
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        a_file = tmp_path / "a_file"
        a_file.write_text("x")
        is_dir = getattr(param.callback, OUTPUT_MARK) == "dir"
        value = {
            "folder": a_file if is_dir else tmp_path,  # a folder option given a file, and back
            "under a file": a_file / "sub" / "out.png",
            "unwritable": Path("/proc/1/wse-no/out.png"),  # nobody makes folders in /proc/1
        }[kind]
        code, output = _invoke(_args(path, param, value))
        assert code == 2, output
        lines = output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"Error: {param.opts[0]} "), lines
        assert sorted(tmp_path.rglob("*")) == [a_file]


def test_a_png_without_its_suffix_gets_it_visibly(tmp_path):
    code, output = _invoke(["wafer", "defects", "--png", tmp_path / "wafer", "--preset", "wse1"])
    assert code == 0, output
    assert f"note: --png {tmp_path / 'wafer'} writes {tmp_path / 'wafer.png'}" in output
    assert (tmp_path / "wafer.png").stat().st_size > 0 and not (tmp_path / "wafer").exists()


@pytest.mark.parametrize(("path", "param"), LIMITED, ids=LIM_IDS)
def test_a_size_past_its_limit_names_the_limit_and_the_override(path, param):
    name = getattr(param.callback, NUMBER_MARK).limit
    env_var = LIMITS[name].env
    over = limit(name) + 1
    args = _args(path, param, over) if path else [param.opts[0], str(over), "wafer", "info"]
    code, output = _invoke(args)
    assert code == 2, output
    assert output.strip().splitlines() == [output.strip()] and env_var in output, output
    assert f"{over:,}" in output
    cmd = ROOT
    for name in path:
        cmd = cmd.commands[name]
    # lifted: not refused for size; a wafer that is not there stops a command that would run
    # (hpc swe --steps 10,000,001 has every other option's default) once its options parse
    stop = ["--preset", "no-such-wafer"] if any("--preset" in p.opts for p in cmd.params) else []
    code, output = _invoke([*args, *stop], env={env_var: str(over)})
    assert "over the limit" not in output


# --- files holding what no option would take --------------------------------------------
NON_FINITE = st.sampled_from([".nan", ".inf", "-.inf", "1e400", "-1e999"])


@settings(max_examples=10, deadline=None)
@given(value=NON_FINITE, key=st.sampled_from(["learning_rate", "beta1", "eps", "weight_decay"]))
def test_non_finite_training_numbers_are_refused_from_files_and_overrides(value, key):
    params = Path(tempfile.mkdtemp()) / "params.yaml"
    params.write_text(f"optimizer:\n  {key}: {value}\n")
    for args in (
        ["train", str(params), "--validate-only"],
        ["train", "tiny", f"optimizer.{key}={value}", "--validate-only"],
    ):
        code, output = _invoke(args)
        assert code == 2 and f"optimizer.{key} must be a finite number" in output, output
        assert len(output.strip().splitlines()) == 1


@settings(max_examples=10, deadline=None)
@given(value=st.sampled_from(["nan", "inf", "-inf", "1e400"]))
def test_non_finite_assumptions_and_spec_fields_are_refused(value):
    spec = Path(tempfile.mkdtemp()) / "spec.yaml"
    spec.write_text(f"base: wse2\nclock_hz: {'.nan' if value == 'nan' else value}\n")
    for args in (
        ["wafer", "info", "--set", f"clock_hz={value}"],
        ["wafer", "info", "--spec", str(spec)],
        ["experiments", "run", "wafer-yield", "--assume", f"hop_latency_cycles={value}"],
    ):
        code, output = _invoke(args)
        assert code == 2 and "finite" in output, (args, output)
        assert len(output.strip().splitlines()) == 1


@settings(max_examples=6, deadline=None)
@given(basis=st.sampled_from(["u", "v"]), bad=st.sampled_from([np.nan, np.inf, -np.inf]),
       count=st.integers(1, 5))  # fmt: skip
def test_a_tlr_operator_with_non_finite_bases_is_refused_at_load(basis, bad, count):
    """`wse hpc tlrmvm run` refuses NaN or Inf in an operator file's bases before the run
    (bench_hostile: it ran 80 s to report a NaN result), counting them."""
    from wse_hpc.tlrmvm import compress, save_operator

    tmp = Path(tempfile.mkdtemp())
    x = np.linspace(0, 1, 40)
    op = save_operator(compress(1 / (1 + np.abs(x[:, None] - x[None, :])), nb=8,
                                threshold=1e-3), tmp / "op.npz")  # fmt: skip
    with np.load(op) as f:
        data = {k: f[k] for k in f.files}
    data[basis] = data[basis].copy()
    data[basis][:count] = bad
    np.savez(tmp / "bad.npz", **data)
    code, output = _invoke(["hpc", "tlrmvm", "run", "--operator", tmp / "bad.npz"])
    assert code == 2 and f"{count:,} {basis.upper()} basis values are NaN or Inf" in output
    assert len(output.strip().splitlines()) == 1 and output.count("corrupt") == 1, output


# --- the issue's cases, as processes with their memory watched ------------------------------
CASES = {
    "serve slots": (["infer", "serve", "--model-dir", "mock", "--max-num-seqs", "1000000000"],
                    "WSE_LIMIT_SERVE_SLOTS"),
    "devices": (["--devices", "100000", "hpc", "stencil"], "WSE_LIMIT_DEVICES"),
    "processes": (["launch", "--nproc", "1000000", "--", "wafer", "info"], "WSE_LIMIT_PROCESSES"),
    "devices per proc": (["launch", "--nproc", "1", "--devices-per-proc", "1000000", "--",
                          "wafer", "info"], "WSE_LIMIT_DEVICES"),
    "gpus": (["plan", "infer", "--model", "llama3-8b", "--gpus", "1e18"], "WSE_LIMIT_GPUS"),
    "spec /dev/zero": (["wafer", "info", "--spec", "/dev/zero"], "not a regular file"),
    "serve port twice": (["launch", "--nproc", "2", "--", "infer", "serve", "--model-dir",
                          "mock"], "same --port"),
    "png folder": (["wafer", "defects", "--png", "/tmp"], "is a folder"),
}  # fmt: skip


def _check_refused(args: list[str], message: str, tmp_path: Path) -> None:
    before = sorted(tmp_path.rglob("*"))
    seen = run_watched(args, env=clean_env(WSE_DEVICES="8"), timeout_s=60)
    assert seen.killed is None, f"{seen.killed}: peak RSS {seen.peak_rss:,} B"
    assert seen.returncode == 2, seen.stderr
    assert seen.stderr.strip().splitlines() == [seen.stderr.strip()], seen.stderr
    assert message in seen.stderr and seen.peak_rss < RSS_CAP
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("case", ["serve slots", "spec /dev/zero"])
def test_the_issues_sizes_are_refused_with_memory_watched(case, tmp_path):
    _check_refused(*CASES[case], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_issue_size_is_refused_with_memory_watched(case, tmp_path):
    _check_refused(*CASES[case], tmp_path)


@pytest.mark.slow
def test_bombs_in_files_are_refused_with_memory_watched(tmp_path):
    files = tmp_path / "in"
    files.mkdir()
    bomb, deep = alias_bomb_yaml(files / "p.yaml"), deep_model_dir(files)
    trace = bomb_trace(files / "bomb.npz")
    _check_refused(["train", str(bomb), "--validate-only"], "WSE_LIMIT_YAML_NODES", files)
    _check_refused(["infer", "generate", "--model-dir", str(deep), "--prompt", "x"],
                   "WSE_LIMIT_JSON_DEPTH", files)  # fmt: skip
    _check_refused(["view", str(trace), "--out", str(tmp_path / "v.html")], "host memory", files)
    assert not (tmp_path / "v.html").exists()


def test_an_alias_bomb_in_a_params_file_is_one_line(tmp_path):
    code, output = _invoke(["train", str(alias_bomb_yaml(tmp_path / "p.yaml")), "--validate-only"])
    assert code == 2 and "WSE_LIMIT_YAML_NODES" in output, output
    assert len(output.strip().splitlines()) == 1


@pytest.mark.parametrize("cmd", [["plan", "infer"], ["plan", "train", "--tokens", "1e12"]])
def test_a_deep_config_json_given_to_plan_is_one_line(cmd, tmp_path):
    """`wse plan --model DIR/config.json` reads it within the JSON depth limit (bench_hostile:
    it was a RecursionError traceback after 30 s)."""
    config = deep_model_dir(tmp_path) / "config.json"
    for model in (config, config.parent):
        code, output = _invoke([*cmd, "--model", model])
        assert code == 2 and "WSE_LIMIT_JSON_DEPTH" in output, output
        assert len(output.strip().splitlines()) == 1


def test_a_deep_config_json_is_refused_by_serve_before_jax_is_imported(tmp_path):
    """`wse infer serve --model-dir DIR` refuses DIR's config.json before the front end and
    the engine bring in JAX (bench_hostile: 30 s to refuse on a loaded machine)."""
    import subprocess
    import sys

    model_dir = deep_model_dir(tmp_path)
    for args in (["infer", "serve", "--model-dir", model_dir], ["plan", "infer", "--model",
                 model_dir / "config.json"]):  # fmt: skip
        r = subprocess.run([sys.executable, "-c", NO_JAX_PROBE, *map(str, args)], timeout=120,
                           capture_output=True, text=True, env=clean_env())  # fmt: skip
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and "WSE_LIMIT_JSON_DEPTH" in lines[0], r.stderr[-2000:]
        assert lines[1:] == ["jax imported: False"], r.stderr[-2000:]


def test_a_process_of_a_run_refuses_its_arguments_before_joining(tmp_path):
    """A process of a multi-process run (as `wse launch` starts it) refuses an argument at
    parsing without JAX and without waiting for its coordinator (bench_hostile: each child
    joined the run first; here there is no coordinator to join)."""
    import subprocess
    import sys

    env = clean_env(WSE_NUM_PROCESSES="2", WSE_PROCESS_ID="1", WSE_COORDINATOR="127.0.0.1:9")
    args = ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--png", tmp_path]
    r = subprocess.run([sys.executable, "-c", NO_JAX_PROBE, *map(str, args)], timeout=120,
                       capture_output=True, text=True, env=env)  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and lines[0].startswith("Error: --png "), r.stderr[-2000:]
    assert lines[1:] == ["jax imported: False"], r.stderr[-2000:]


def test_a_refused_train_leaves_no_model_dir(tmp_path):
    model_dir = tmp_path / "a" / "b" / "run"
    for bad in (["train_input.data_dir=/nonexistent/corpus"], ["--checkpoint-path", "/nope"]):
        code, output = _invoke(["train", "tiny", *bad, "--model-dir", model_dir])
        assert code == 2 and len(output.strip().splitlines()) == 1, output
        assert not (tmp_path / "a").exists(), bad
    assert os.listdir(tmp_path) == []


def test_ports_are_checked_before_serving_or_launching():
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        for args, message in (
            (["infer", "serve", "--model-dir", "mock", "--port", "0", "--grpc-port", port],
             f"--grpc-port {port} on 127.0.0.1 cannot be bound"),
            (["infer", "serve", "--model-dir", "mock", "--port", port],
             f"--port {port} on 127.0.0.1 cannot be bound"),
            (["infer", "serve", "--model-dir", "mock", "--port", "8123", "--grpc-port", "8123"],
             "both 8123"),
            (["launch", "--nproc", "1", "--port", port, "--", "wafer", "info"],
             f"--port {port} cannot be the coordinator's"),
            (["launch", "--nproc", "1", "--", "--coordinator", "x:1", "wafer", "info"],
             "--coordinator is set by wse launch itself"),
        ):  # fmt: skip
            code, output = _invoke(args)
            assert code == 2 and message in output, (args, output)
            assert len(output.strip().splitlines()) == 1
