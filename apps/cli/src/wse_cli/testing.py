"""Test support for running the installed `wse` as subprocesses, alone or under `wse launch`.

These runs emulate several hosts on one machine with virtual CPU devices (`WSE_DEVICES`,
`--devices-per-proc`), so every child runs on the CPU (`JAX_PLATFORMS=cpu`), the default
backend or not: on a one-GPU host each process would otherwise take the same GPU (NCCL
refuses it: "Duplicate GPU detected") and `WSE_DEVICES=8` would give one device, not 8.

`invoke(root, args)` runs `wse ARGS` in this process (exit code, output) and
`walk_commands(root)` yields every (path, click command) of the app, for the tests that read
every option of every command. `run_watched(args)` runs `wse ARGS` for a hostile-input test:
it samples the resident memory of the process and all its children every few milliseconds
and kills the whole tree past a cap (1 GiB), so that a regression fails the test instead of
filling the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "WSE",
    "unprivileged",
    "NO_JAX_PROBE",
    "alias_bomb_yaml",
    "bomb_trace",
    "deep_model_dir",
    "clean_env",
    "run_json",
    "launch_json",
    "Watched",
    "run_watched",
    "RSS_CAP",
    "invoke",
    "refused_in_one_line",
    "walk_commands",
    "serve_configs",
]

RSS_CAP = 1 << 30  # bytes: no process tree refusing an input may hold more (issue 43)

WSE = [sys.executable, "-m", "wse_cli"]

# `python -c NO_JAX_PROBE ARGS...` runs `wse ARGS...` and prints, last on stderr, whether the
# command imported JAX ("jax imported: False"): refusals made before JAX's import
NO_JAX_PROBE = """import atexit, runpy, sys
atexit.register(lambda: print("jax imported:", "jax" in sys.modules, file=sys.stderr))
sys.argv = ["wse", *sys.argv[1:]]
runpy.run_module("wse_cli", run_name="__main__", alter_sys=True)
"""


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without WSE_* and XLA settings, on the CPU, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WSE_", "XLA_FLAGS"))}
    env["JAX_PLATFORMS"] = "cpu"
    env.update(extra)
    return env


def _last_json(text: str) -> dict:
    # gloo's log goes to stderr (`multiprocess.join`); a line before the JSON is skipped
    return json.loads(text[text.index("\n{") + 1 if not text.startswith("{") else 0 :])


def run_json(args: Sequence[str], *, devices: int = 8, timeout_s: float = 300) -> dict:
    """`wse ARGS` in one process with `devices` virtual devices; its JSON output."""
    done = subprocess.run(
        WSE + list(args),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=clean_env(WSE_DEVICES=str(devices)),
    )
    if done.returncode != 0:
        raise AssertionError(f"wse {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return _last_json(done.stdout)


def launch_json(
    args: Sequence[str], *, nproc: int = 2, devices_per_proc: int = 4, timeout_s: float = 300
) -> dict:
    """`wse launch --nproc N -- ARGS`; the JSON that process 0 prints."""
    cmd = WSE + [
        "launch",
        "--nproc",
        str(nproc),
        "--devices-per-proc",
        str(devices_per_proc),
        "--",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=clean_env())
    if done.returncode != 0:
        raise AssertionError(f"wse launch {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return _last_json(done.stdout)


class Watched(NamedTuple):
    """What `run_watched` saw: exit code (None: killed), stderr, wall time, peak tree RSS."""

    returncode: int | None
    stderr: str
    wall_s: float
    peak_rss: int
    killed: str | None  # why the tree was killed ("rss" or "timeout"), None if it exited


def _tree_rss(proc: Any) -> int:  # a psutil.Process (psutil is imported lazily)
    import psutil

    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:  # gone meanwhile
            pass
    return total


def _kill_tree(proc: Any) -> None:
    import psutil

    for p in [*proc.children(recursive=True), proc]:
        try:
            p.kill()
        except psutil.Error:
            pass


def run_watched(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cap_bytes: int = RSS_CAP,
    timeout_s: float = 60.0,
    stdin: int | None = subprocess.DEVNULL,
) -> Watched:
    """`wse ARGS` with its process tree's resident memory watched (module docstring)."""
    import psutil

    t0 = time.perf_counter()
    popen = subprocess.Popen(
        WSE + list(args),
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env or clean_env(WSE_DEVICES="8"),
    )
    proc, peak, killed = psutil.Process(popen.pid), 0, None
    while popen.poll() is None:
        peak = max(peak, _tree_rss(proc))
        if peak > cap_bytes or time.perf_counter() - t0 > timeout_s:
            killed = "rss" if peak > cap_bytes else "timeout"
            _kill_tree(proc)
            break
        time.sleep(0.01)
    _, err = popen.communicate()
    code = None if killed else popen.returncode
    return Watched(code, err.decode(errors="replace"), time.perf_counter() - t0, peak, killed)


def invoke(root: Any, args: Sequence[Any], env: dict[str, str] | None = None) -> tuple[int, str]:
    """(exit code, output) of `wse ARGS` in this process; `root` is the click command of the
    app, built once (`typer.main.get_command(app)`: typer's runner rebuilds it every call)."""
    from typer.testing import CliRunner

    with CliRunner().isolation(env=env) as out:
        try:
            root.main(args=[str(a) for a in args], prog_name="wse")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        return code, out[2].getvalue().decode()


def walk_commands(cmd: Any, path: tuple[str, ...] = ()) -> Any:
    """Every (path of names, click command) under `cmd`, itself first."""
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from walk_commands(sub, (*path, name))


# --- hostile files for the size tests and bench/bench_hostile.py ---------------------------
def setfl_with_line(setfl: Path, folder: Path, line: int, text: str, name: str = "bad") -> Path:
    """A copy of the setfl potential `setfl` as `folder`/`name`.eam.alloy with its line `line`
    (from 0) replaced by `text`: a hostile potential file."""
    lines = Path(setfl).read_text().splitlines()
    lines[line] = text
    path = folder / f"{name}.eam.alloy"
    path.write_text("\n".join(lines) + "\n")
    return path


def alias_bomb_yaml(path: Path) -> Path:
    """A params.yaml whose aliases expand to 10^9 items (a billion laughs)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path.write_text(
        "optimizer:\n  learning_rate: 0.001\nbomb:\n" + "".join(f"  {line}\n" for line in lines)
    )
    return path


def deep_model_dir(root: Path) -> Path:
    """A model dir under `root` whose config.json nests 100,000 lists deep."""
    d = root / "deep_model"
    d.mkdir()
    (d / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    return d


def bomb_trace(path: Path) -> Path:
    """A trace archive whose layer header claims 100,000 x 100,000 float64 (74.5 GiB)."""
    import io
    import zipfile

    import numpy as np

    with zipfile.ZipFile(path, "w") as z:
        head = io.BytesIO()
        np.save(head, np.frombuffer(json.dumps({"schema_version": 1}).encode(), np.uint8))
        z.writestr("header.npy", head.getvalue())
        layer = io.BytesIO()
        header = {"descr": "<f8", "fortran_order": False, "shape": (100_000, 100_000)}
        np.lib.format.write_array_header_1_0(layer, header)
        z.writestr("busy.npy", layer.getvalue() + b"\0" * 64)
    return path


def zip_bomb_npz(path: Path, member: str = "u.npy", n_bytes: int = 256 << 20) -> Path:
    """An .npz whose `member` is a float64 array of `n_bytes` zeros, deflated (~1,000x: a
    256 MiB member in a ~250 KiB file), beside a small `header.npy` as a trace has."""
    import io
    import zipfile

    import numpy as np

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": "<f8", "fortran_order": False, "shape": (n_bytes // 8,)}
    )
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        small = io.BytesIO()
        np.save(small, np.frombuffer(json.dumps({"schema_version": 1}).encode(), np.uint8))
        z.writestr("header.npy", small.getvalue())
        with z.open(member, "w", force_zip64=True) as f:
            f.write(head.getvalue())
            chunk = bytes(1 << 24)
            for _ in range(n_bytes // len(chunk)):
                f.write(chunk)
    return path


def refused_in_one_line(
    root, args: Sequence, message: str, env: dict[str, str] | None = None
) -> str:
    """`wse ARGS` in this process (`invoke`) must exit 2 with one line, "Error: ..." holding
    `message` and no traceback; that line (the hostile-input tests' check)."""
    code, output = invoke(root, [str(a) for a in args], env)
    lines = output.strip().splitlines()
    assert code == 2, (code, output[-2000:])
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines
    assert message in lines[0] and "Traceback" not in output, lines[0]
    return lines[0]


def one_line_of(done: Any) -> str:
    """The one line, less its "Error: ", of a `wse` subprocess (a CompletedProcess run with
    text=True) that must exit 2 with nothing else on stderr (the env tests' check)."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines
    return lines[0].removeprefix("Error: ")


def unprivileged() -> list[str] | None:
    """The prefix that runs a command without root's power over mode bits: [] for a user
    other than root, `setpriv` dropping CAP_DAC_OVERRIDE for root, None where none is at
    hand (a test then skips: as root, mode bits test nothing)."""
    import shutil

    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    caps = "-dac_override,-dac_read_search"
    prefix = [setpriv, "--bounding-set", caps, "--inh-caps", caps, "--"] if setpriv else []
    if not prefix or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        return None
    return prefix


def serve_configs(monkeypatch: Any) -> list[Any]:
    """The ServeConfig each `wse infer serve` in the test would serve, appended to the list
    returned, the server never started (`monkeypatch`: pytest's)."""
    import wse_inference.serve.app

    configs: list[Any] = []
    monkeypatch.setattr(
        wse_inference.serve.app, "serve", lambda engine, config, **_: configs.append(config)
    )
    return configs
