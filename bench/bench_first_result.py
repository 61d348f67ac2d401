"""Time to first result: each CLI workload as a new user runs it, with a cold and a warm
compile cache.

    python bench/bench_first_result.py [--quick] [--rounds N]

Each workload is one `python -m wse_cli ...` process (the `wse` command) started fresh; the
clock runs from the start of the process to its first result: for MD the thermo row of
step 1 (the first step done; 32,000 atoms, Cu fcc 20^3 at 1600 K, the Zhou 2004 Cu setfl
written here), for the others the end of the command (its result printed). "cold" runs
with empty persistent compile caches (`WSE_CACHE_DIR` a new folder: JAX's cache, and
numba's PE kernels in its `numba/`, `NUMBA_CACHE_DIR` left to that default), "warm" runs the
same command again on the caches the cold run filled. Workloads at their usual sizes: MD 32,000
atoms, BiCGSTAB fp32 48^3 (`hpc stencil --kind bicgstab`), TLR-MVM n 1,024 (`hpc tlrmvm
run` on an operator compressed here), training the `tiny` config for 2 steps. Each (cold,
warm) pair is run `--rounds` times (default 2, `--quick` 1), workloads interleaved; the
median of each is reported with every sample. Targets (issue 44): MD at 32,000 atoms warm
<= 5 s and cold <= 20 s to the first step. Writes bench/results/first_result.json with the
record of `bench/rounds.py` (host, versions, threads).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rounds import record

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
TARGETS_S = {"md 32000 atoms": {"warm": 5.0, "cold": 20.0}}  # to the first MD step
ROW = re.compile(r"^\s*(\d+)\s+-?\d")  # a thermo row: the step, then a number
TIMEOUT_S = 900


def _md_first_step(line: str) -> bool:
    m = ROW.match(line)
    return m is not None and int(m.group(1)) >= 1


def workloads(tmp: Path, quick: bool) -> dict[str, tuple[list[str], object]]:
    """name -> (CLI arguments, first-result test of a stdout line or None: the exit)."""
    from wse_hpc.md import write_setfl, zhou04
    from wse_hpc.tlrmvm import compress, save_operator
    from wse_hpc.tlrmvm.seismic import green_operator

    pot = write_setfl(zhou04(["Cu"], knots=1000), tmp / "Cu_zhou04.eam.alloy")
    op = tmp / "seismic_1024.npz"
    save_operator(compress(green_operator(n=1024), nb=64, threshold=1e-3), op)
    params = ROOT / "packages/trainer/src/wse_trainer/configs/tiny.yaml"
    md = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615"]
    md += ["--cells", "20", "20", "20", "--potential", str(pot), "--temperature-K", "1600"]
    md += ["--steps", "2", "--thermo-every", "1"]
    out = {"md 32000 atoms": (md, _md_first_step)}
    if quick:
        return out
    stencil = ["hpc", "stencil", "--kind", "bicgstab", "--grid", "48", "48", "48"]
    out["bicgstab fp32 48^3"] = (stencil + ["--dtype", "fp32", "--tol", "1e-6"], None)
    out["tlrmvm n 1024"] = (["hpc", "tlrmvm", "run", "--operator", str(op)], None)
    train = ["train", "--params", str(params), "--max-steps", "2"]
    out["train tiny 2 steps"] = (train + ["--model-dir", str(tmp / "train")], None)
    return out


def first_result_s(args: list[str], first, cache: Path, tmp: Path) -> dict:
    """Seconds from the start of `python -m wse_cli ARGS` to its first result (see the
    module doc); the process is left to finish (or stopped at the first result for MD)."""
    env = {**os.environ, "WSE_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    env.pop("NUMBA_CACHE_DIR", None)  # numba's cache under WSE_CACHE_DIR: cold is cold
    for stale in (tmp / "train",):  # each run starts its own training folder
        subprocess.run(["rm", "-rf", str(stale)], check=False)
    cmd = [sys.executable, "-m", "wse_cli", *args]
    cpu0 = _children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    seen, lines = None, []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if first is not None and first(line):
            seen = time.perf_counter() - t0
            proc.kill()
            break
    rc = proc.wait(timeout=TIMEOUT_S)
    done = time.perf_counter() - t0
    cpu = _children_cpu_s() - cpu0  # the process's user + system time, to its end or kill
    ok = seen is not None if first is not None else rc == 0
    s = seen if first is not None else done
    return {"s": s, "cpu_s": cpu, "ok": ok, "rc": rc, "tail": lines[-3:]}


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's waited-for children (a shared machine's
    load moves the wall clock more than this)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="MD at 32,000 atoms only, one round")
    ap.add_argument("--rounds", type=int, default=None, help="(cold, warm) pairs per workload")
    ap.add_argument("--only", default=None, help="the workloads whose name starts with this")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 2)
    rec = record()  # before the runs: the load they start under
    samples: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        work = workloads(tmp, args.quick)
        if args.only:
            work = {k: v for k, v in work.items() if k.startswith(args.only)}
        for r in range(rounds):
            for name, (cli, first) in work.items():  # workloads interleaved, round by round
                cache = tmp / f"cache_{r}_{len(samples.get(name, {}).get('cold', []))}"
                s = samples.setdefault(name, {"cold": [], "warm": []})
                for kind in ("cold", "warm"):  # warm: the same cache, filled by the cold run
                    s[kind].append(first_result_s(cli, first, cache / name.split()[0], tmp))
                    got = f"{s[kind][-1]['s']:.1f} s, cpu {s[kind][-1]['cpu_s']:.1f} s"
                    print(f"{name:<20} {kind}: {got}", flush=True)
    rows = {name: _summary(name, s) for name, s in samples.items()}
    for name, row in rows.items():
        print(_line(name, row))
    out = {"benchmark": "first_result", "rounds": rounds, "rows": rows, **rec}
    out["load_average_at_end"] = list(os.getloadavg())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "first_result.json").write_text(json.dumps(out, indent=2, default=float))
    print(
        f"load average {rec['host']['load_average'][0]:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end; {rec['host']['utc']}"
    )
    print(f"wrote {RESULTS / 'first_result.json'}")


def _summary(name: str, s: dict[str, list[dict]]) -> dict:
    row: dict = {"samples": s}
    for kind, runs in s.items():
        good = [x["s"] for x in runs if x["ok"]]
        row[f"{kind}_s"] = statistics.median(good) if good else None
        row[f"{kind}_cpu_s"] = statistics.median(x["cpu_s"] for x in runs)
        target = TARGETS_S.get(name, {}).get(kind)
        if target is not None:
            row[f"{kind}_target_s"] = target
            row[f"{kind}_met"] = bool(good) and max(good) <= target
    return row


def _line(name: str, row: dict) -> str:
    parts = []
    for kind in ("cold", "warm"):
        v = row[f"{kind}_s"]
        cpu = row[f"{kind}_cpu_s"]
        text = f"{kind} {v:.1f} s (cpu {cpu:.1f} s)" if v is not None else f"{kind} failed"
        if f"{kind}_target_s" in row:
            verdict = "met" if row[f"{kind}_met"] else "NOT met"
            text += f" (target <= {row[f'{kind}_target_s']:g} s every round: {verdict})"
        parts.append(text)
    return f"{name:<20} " + ", ".join(parts)


if __name__ == "__main__":
    main()
