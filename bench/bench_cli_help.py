"""`wse --help` start-up: wall and CPU time of the help screen against a bare interpreter.

The target is 0.3 s wall on a quiet machine (issue 45): rendering help imports typer and the
CLI's own modules only (no rich renderer, no NumPy, no JAX, no other package of the stack), and
the `wse` script prints a stored rendering when it has one (`wse_cli.entry`: keyed by the CLI's
code, version and terminal width). "wse --help" is that usual call; "first call" runs with an
empty cache (the first call after an install or an edit), which renders it. Each run is a
fresh process; the baseline `python -c pass` is measured beside it in interleaved rounds, so
the difference is what the CLI itself costs. CPU time (user + sys of the child) is reported
too, since on a shared machine wall time mostly measures the load. Also lists the top-level
modules help imports.
Prints a table and writes bench/results/cli_help.json.

    python bench/bench_cli_help.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rounds import interleaved, record  # noqa: E402  (bench/rounds.py)

RESULTS = Path(__file__).parent / "results"
TARGET_S = 0.3  # issue 45: `wse --help` in under 0.3 s
STACK = ("wse_core", "wse_models", "wse_trainer", "wse_inference", "wse_hpc")
HEAVY = ("rich", "numpy", "jax", *STACK)


def _timed(cmd: list[str], cache: str | None = None) -> tuple[float, float]:
    """(wall s, child CPU s) of one run of `cmd`; `cache`: its WSE_CACHE_DIR ("" a new empty
    one, the help not rendered yet: the first call after an install or an edit)."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="wse_help_cold_") as empty:
        if cache is not None:
            env["WSE_CACHE_DIR"] = cache or empty
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _interleaved(
    cmds: dict[str, tuple[list[str], str | None]], repeats: int
) -> dict[str, dict[str, float]]:
    """Each command run once per round, in turn (`bench/rounds.py`'s grammar), `repeats`
    rounds; per command the median and best wall and the median CPU time."""
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}

    def contender(name: str):
        def run() -> float:
            runs[name].append(_timed(*cmds[name]))
            return runs[name][-1][0]

        return run

    interleaved({k: contender(k) for k in cmds}, repeats)
    return {k: _summary(v) for k, v in runs.items()}


def _summary(runs: list[tuple[float, float]]) -> dict[str, float]:
    return {
        "wall_s": statistics.median(w for w, _ in runs),
        "cpu_s": statistics.median(c for _, c in runs),
        "best_wall_s": min(w for w, _ in runs),
    }


def imported_top_level(cmd_prefix: list[str]) -> list[str]:
    """Top-level modules `--help` imports (python -X importtime)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *cmd_prefix, "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    names = {
        line.split("|")[-1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return sorted(n for n in names if n and not n.startswith("_"))


def _console_script() -> Path:
    """The `wse` script pip installed beside this interpreter (what a venv or a plain
    install runs), not a version manager's shim found first on PATH: pyenv's `wse` is a
    bash script that runs `pyenv exec` (~0.1 s of its own) before the real one."""
    real = Path(sys.executable).resolve().with_name("wse")
    if real.is_file():
        return real
    found = shutil.which("wse")
    if found is None:
        raise SystemExit("no `wse` script: install the stack first (pip install -e .)")
    return Path(found)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    help_cmd = [str(_console_script()), "--help"]
    with tempfile.TemporaryDirectory(prefix="wse_help_warm_") as warm:
        _timed(help_cmd, warm)  # renders and stores the help once (`wse_cli.entry`)
        cmds = {"base": ([sys.executable, "-c", "pass"], None), "help": (help_cmd, warm),
                "first": (help_cmd, "")}  # fmt: skip
        timed = _interleaved(cmds, args.repeats)
    base, cli, first = timed["base"], timed["help"], timed["first"]
    mods = imported_top_level(["-m", "wse_cli"])
    heavy = [m for m in HEAVY if m in mods]
    out = {
        "command": " ".join([Path(help_cmd[0]).name, *help_cmd[1:]]),
        "repeats": args.repeats,
        "target_s": TARGET_S,
        "help": cli,
        "help_first_call": first,
        "python_c_pass": base,
        "cli_own_wall_s": cli["wall_s"] - base["wall_s"],
        "heavy_imports": heavy,
        "load_average": os.getloadavg()[0],
        **record(),
    }
    print(f"{'':24}{'median wall s':>14}{'best wall s':>13}{'median CPU s':>14}")
    rows = (("wse --help", cli), ("  first call (no cache)", first), ("python -c pass", base))
    for name, row in rows:
        print(f"{name:24}{row['wall_s']:14.3f}{row['best_wall_s']:13.3f}{row['cpu_s']:14.3f}")
    verdict = "within" if cli["wall_s"] < TARGET_S else "over"
    print(
        f"help {verdict} the {TARGET_S} s target (load average {out['load_average']:.1f}); "
        f"heavy modules imported: {', '.join(heavy) or 'none'}"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cli_help.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
