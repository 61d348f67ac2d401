"""The GPU lane (issue 32): one command that, on a lent GPU machine with no network, installs
the carried wheels, runs the default test suite on the GPU (and, beside it, the tests that
need 8 CPU devices on the CPU), runs the device benchmark, and writes one JSON.

    bash tools/gpu_check.sh                       # on the GPU machine (device tool, below)
    JAX_PLATFORMS=cpu bash tools/gpu_check.sh     # CPU mode: the same steps here

On the GPU machine (`run(command="bash tools/gpu_check.sh", carry=[".whl"], timeout_s=600)`,
after `bash tools/fetch_gpu_wheels.sh` here):
1. install: every carried wheel (.whl/) whose distribution the image lacks, into /tmp/site
   (on PYTHONPATH for every step below; nothing of the image is replaced), grpcio-tools the
   newest carried version whose grpcio and protobuf requirements the image meets, and a
   `wse` launcher (`python -m wse_cli`) in /tmp/site/bin, on PATH (the project is not
   installed there); then a child imports every third-party module the project uses and
   the JSON lists what failed;
2. tests, two pytest processes at once: "device", the default suite minus `cpu_devices` tests
   (`-m "not slow and not cpu_devices"`, so the `gpu` tests run too) with the GPU as JAX's
   default backend; "cpu8", the `cpu_devices` tests with JAX_PLATFORMS=cpu (8 virtual CPU
   devices, as in CI). The tests run with --xla_gpu_deterministic_ops=true where XLA accepts
   it (scatter-adds without atomics: runs that must repeat bit for bit do); the bench runs
   with XLA's defaults. Each test has a
   120 s limit; pytest-xdist spreads each pass over workers where the image has it;
3. bench: bench/bench_device.py (roofline, md, train, decode) in the time left;
4. the JSON: $OUT/gpu_check.json (when OUT is set) and bench/results/gpu_check.json, with the
   device, versions, install report, per-pass counts, every failed test with its message's
   start, the bench's figures and each step's wall time; logs beside it in $OUT.
The steps share one budget (--budget-s, default 540 s) so the command ends inside the device
tool's 600 s limit and the JSON is written even when a step runs out of time.

CPU mode (JAX_PLATFORMS=cpu) skips the install, runs the "device" pass with
WSE_TEST_CPU_DEVICES=1 (the one device a one-GPU host gives), both passes one after the
other on a selection of test files (--tests; default `CPU_SELECTION`, every marker and split
represented) and the bench with --quick, and writes bench/results/gpu_check_cpu.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = Path("/tmp/site")
DETERMINISTIC = "--xla_gpu_deterministic_ops=true"
# What CPU mode runs by default: the gpu tests (skipped on a CPU), a mesh-parametrized
# module (its 1x1 cases in the device pass, 2x4 / 4x2 in the cpu8 pass), the HLO precision
# check, an 8-device-only module, mesh_rows-parametrized pipeline tests and a CLI test that
# follows the process's device count. (CLI tests that pin WSE_DEVICES=8 fail in CPU mode's
# one-device pass by design: the CLI will not switch a started CPU backend to 8 devices. On
# a GPU host the GPUs are the default backend and the 8 CPU devices exist beside them.)
CPU_SELECTION = [
    "tests/test_gpu_devices.py",
    "packages/wse_core/tests/test_core_fabric.py",
    "packages/hpc_kernels/tests/test_tlrmvm_precision.py",
    "packages/models/tests/test_models_sharding.py",
    "packages/inference/tests/test_infer_pipeline.py",
    "tests/test_bicgstab_reach.py",
]
# carried at several versions, the newest whose grpcio and protobuf the image meets installed
PAIRED = ("grpcio-tools", "grpcio-health-checking")
# top-level modules the project imports that come from third-party distributions
MODULES = [
    "jax", "numpy", "scipy", "yaml", "matplotlib", "threadpoolctl", "typer", "rich", "flax",
    "optax", "orbax.checkpoint", "safetensors", "tokenizers", "datasets", "tensorboardX",
    "grpc", "grpc_tools", "grpc_health", "google.protobuf", "fastapi", "starlette", "jinja2",
    "uvicorn", "httpx", "openai", "prometheus_client", "psutil", "numba", "pytest",
    "pytest_timeout", "hypothesis", "ase", "pandas", "torch", "transformers", "jax_md",
]  # fmt: skip


def _src_path() -> str:
    return os.pathsep.join(
        str(p) for p in sorted(ROOT.glob("packages/*/src")) + [ROOT / "apps/cli/src"]
    )


def install(wheels: Path) -> dict:
    """The carried wheels the image lacks into SITE; grpcio-tools and grpcio-health-checking
    each the newest that fits the image's grpcio and protobuf."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename

    def have(name: str) -> str | None:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    chosen: list[Path] = []
    skipped: dict[str, str] = {}
    versioned: dict[str, list] = {n: [] for n in PAIRED}  # each paired with the image's grpcio
    for w in sorted(wheels.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(w.name)
        if name in versioned:
            versioned[name].append((version, w))
        elif have(name):
            skipped[str(name)] = f"image has {have(name)}"
        else:
            chosen.append(w)
    for family, tools in versioned.items():
        for version, w in sorted(tools, reverse=True):
            with zipfile.ZipFile(w) as z:  # the image has no `unzip`
                meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")))
            reqs = [
                Requirement(x.split(":", 1)[1])
                for x in meta.decode().splitlines()
                if x.startswith("Requires-Dist:")
            ]
            fits = all(
                have(r.name) is not None and r.specifier.contains(have(r.name), prereleases=True)
                for r in reqs
                if canonicalize_name(r.name) in ("grpcio", "protobuf")
            )
            if fits and not have(family):
                chosen.append(w)
                break
            skipped[f"{family} {version}"] = (
                "image has it"
                if have(family)
                else (
                    f"needs {[str(r) for r in reqs]}; image: grpcio {have('grpcio')}, "
                    f"protobuf {have('protobuf')}"
                )
            )
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
           "--no-compile", "--no-cache-dir", "--target", str(SITE), *map(str, chosen)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True) if chosen else None
    return {
        "installed": [w.name for w in chosen],
        "skipped": skipped,
        "pip_rc": out.returncode if out else 0,
        "pip_stderr": out.stderr[-2000:] if out else "",
    }


def launcher(bin_dir: Path) -> Path:
    """A `wse` command in bin_dir that runs this checkout's CLI (`python -m wse_cli`, with
    the sources and SITE on its PYTHONPATH, as an installed one would find them): the project
    is not pip-installed on the GPU machine, so it has no console script, and the tests that
    run the installed command (test_core_cli) need one on PATH."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wse = bin_dir / "wse"
    path = os.pathsep.join([_src_path(), str(SITE)])
    wse.write_text(
        f'#!/bin/sh\nexport PYTHONPATH="{path}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
        f'exec "{sys.executable}" -m wse_cli "$@"\n'
    )
    wse.chmod(0o755)
    return wse


def _run(cmd: list[str], env: dict, timeout: float, log: Path | None = None) -> dict:
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=max(timeout, 1))
        rc, text = out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = "timeout", _text(e.stdout) + _text(e.stderr)
    if log is not None:
        log.write_text(text)
    return {"rc": rc, "wall_s": time.perf_counter() - t0, "tail": text[-3000:]}


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def probe(env: dict) -> dict:
    """Device, versions, which modules fail to import, and whether XLA takes DETERMINISTIC."""
    code = (
        "import json, importlib, jax, sys\n"
        f"mods = {MODULES!r}\n"
        "bad = {}\n"
        "for m in mods:\n"
        "    try: importlib.import_module(m)\n"
        "    except Exception as e: bad[m] = f'{type(e).__name__}: {e}'[:300]\n"
        "d = jax.devices()[0]\n"
        "import flax, numpy\n"
        "v = {'python': sys.version.split()[0], 'jax': jax.__version__, 'flax': flax.__version__,\n"
        "     'numpy': numpy.__version__}\n"
        "try:\n    import torch; v['torch'] = torch.__version__\nexcept Exception: pass\n"
        "print(json.dumps({'platform': d.platform, 'kind': d.device_kind,\n"
        "                  'count': len(jax.devices()), 'versions': v, 'import_failures': bad}))\n"
    )
    r = _run([sys.executable, "-c", code], env, 300)
    try:
        info = json.loads(r["tail"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": r["tail"]}
    if info["platform"] == "gpu":
        flags = f"{env.get('XLA_FLAGS', '')} {DETERMINISTIC}".strip()
        ok = _run([sys.executable, "-c", "import jax; jax.numpy.ones(3).sum().block_until_ready()"],
                  {**env, "XLA_FLAGS": flags}, 120)["rc"] == 0  # fmt: skip
        info["deterministic_ops"] = ok
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True,
        )  # fmt: skip
        info["nvidia_smi"] = smi.stdout.strip()
    return info


def junit(path: Path) -> dict:
    """Counts and failed tests (id: the message's start) from a junit XML file."""
    if not path.exists():
        return {"error": "no junit file (the pass did not finish)"}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {
        k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")
    }
    failed = {}
    for case in root.iter("testcase"):
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                name = f"{case.get('classname')}::{case.get('name')}"
                failed[name] = (node.get("message") or node.text or "")[:300]
    skipped = {}
    for case in root.iter("testcase"):
        node = case.find("skipped")
        if node is not None:
            msg = re.sub(r"\d+", "N", (node.get("message") or "")[:120])
            skipped[msg] = skipped.get(msg, 0) + 1
    passed = counts["tests"] - sum(counts[k] for k in ("failures", "errors", "skipped"))
    return {**counts, "passed": passed, "failed": failed, "skip_reasons": skipped}


def test_passes(
    env: dict, cpu_mode: bool, tests: list[str], budget_s: float, logs: Path, cpu8: bool = True
) -> dict:
    """The "device" and "cpu8" passes (at once on a GPU machine, in turn in CPU mode);
    without `cpu8` the device pass alone, on the workers both would share."""
    workers = {}
    try:
        import xdist  # noqa: F401 - is pytest-xdist there?

        if not cpu_mode:
            workers = {
                # -v: each result is logged as it comes, so a pass cut by the budget
                # still shows (in pytest_device.log) which tests failed
                "device": ["-n", "10" if cpu8 else "14", "--dist", "loadfile", "-v"],
                "cpu8": ["-n", "4", "--dist", "loadfile", "-v"],
            }
    except ImportError:
        pass
    passes = {
        "device": (
            "not slow and not cpu_devices",
            {"WSE_TEST_CPU_DEVICES": "1"} if cpu_mode else {},
        ),
        "cpu8": ("cpu_devices and not slow", {"JAX_PLATFORMS": "cpu"}),
    }
    if not cpu8:  # the CPU-only tests: CI's own machine runs them
        del passes["cpu8"]
    procs, rcs, out = {}, {}, {}
    t0 = time.perf_counter()
    for name, (marks, extra) in passes.items():
        xml = logs / f"junit_{name}.xml"
        xml.unlink(missing_ok=True)  # never read an earlier run's results
        cmd = [sys.executable, "-m", "pytest", "-q", "-m", marks, "-p", "no:cacheprovider",
               "--timeout", "120", f"--junitxml={xml}", "-rfE", *workers.get(name, [])]  # fmt: skip
        cmd += tests
        log = open(logs / f"pytest_{name}.log", "w")  # closed below
        procs[name] = (
            subprocess.Popen(
                cmd, env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
            ),
            log,
            xml,
        )
        if cpu_mode:  # two cores: one pass at a time
            rcs[name] = _wait(procs[name][0], budget_s - (time.perf_counter() - t0))
    for name, (proc, log, xml) in procs.items():
        rc = rcs[name] if name in rcs else _wait(proc, budget_s - (time.perf_counter() - t0))
        log.close()
        out[name] = {"marks": passes[name][0], "rc": rc, **junit(xml)}
    out["wall_s"] = time.perf_counter() - t0
    out["xdist"] = bool(workers)
    return out


def _wait(proc: subprocess.Popen, left: float):
    try:
        return proc.wait(timeout=max(left, 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return "timeout"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=540.0, help="all steps together")
    ap.add_argument(
        "--tests",
        nargs="*",
        default=None,
        help="test paths (default: all; CPU mode: CPU_SELECTION)",
    )
    ap.add_argument(
        "--skip", default="", help="comma-separated steps to skip: tests,cpu8 (that pass),bench"
    )
    ap.add_argument(
        "--bench-parts", default=None, help="bench_device.py's --parts (default: all of them)"
    )
    args = ap.parse_args()
    start = time.perf_counter()
    left = lambda: args.budget_s - (time.perf_counter() - start)  # noqa: E731
    cpu_mode = os.environ.get("JAX_PLATFORMS", "") == "cpu"
    out_dir = Path(os.environ.get("OUT") or ROOT / "bench" / "results")
    logs = out_dir if os.environ.get("OUT") else Path("/tmp") / "gpu_check_logs"
    logs.mkdir(parents=True, exist_ok=True)
    git = ["git", "rev-parse", "--short", "HEAD"]
    report: dict = {
        "lane": "tools/gpu_check.sh",
        "mode": "cpu" if cpu_mode else "gpu",
        "started_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git": subprocess.run(git, capture_output=True, text=True, cwd=ROOT).stdout.strip(),
        "budget_s": args.budget_s,
    }
    result_name = "gpu_check_cpu.json" if cpu_mode else "gpu_check.json"

    def save() -> None:
        report["wall_s"] = time.perf_counter() - start
        text = json.dumps(report, indent=2, default=str) + "\n"
        for d in {out_dir, ROOT / "bench" / "results"}:
            d.mkdir(parents=True, exist_ok=True)
            (d / result_name).write_text(text)

    env = {**os.environ, "CI": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}  # fmt: skip
    path = [_src_path(), env.get("PYTHONPATH", "")]
    if not cpu_mode:
        t0 = time.perf_counter()
        report["install"] = install(ROOT / ".whl")
        report["install"]["wall_s"] = time.perf_counter() - t0
        path.insert(0, str(SITE))
        report["install"]["wse"] = str(launcher(SITE / "bin"))
        env["PATH"] = os.pathsep.join([str(SITE / "bin"), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    report["device"] = probe(env)
    if report["device"].get("deterministic_ops"):
        test_env = {**env, "XLA_FLAGS": f"{env.get('XLA_FLAGS', '')} {DETERMINISTIC}".strip()}
    else:
        test_env = env  # the bench keeps XLA's defaults (deterministic scatters are slower)
    print(json.dumps({k: report[k] for k in ("mode", "device")}, indent=1), flush=True)
    save()
    tests = args.tests if args.tests is not None else (CPU_SELECTION if cpu_mode else [])
    if "tests" not in args.skip:
        # the bench keeps 250 s on a GPU; on a CPU (slower, and --quick) half the budget
        share = left() - (10 if "bench" in args.skip else 0.5 * args.budget_s if cpu_mode else 250)
        cpu8 = "cpu8" not in args.skip
        report["tests"] = test_passes(test_env, cpu_mode, tests, share, logs, cpu8)
        report["tests"]["selection"] = tests or "all"
        for name in ("device", "cpu8")[: 1 + cpu8]:
            p = report["tests"][name]
            print(f"{name}: rc {p['rc']}, {p.get('passed')} passed, {p.get('failures')} failed, "
                  f"{p.get('errors')} errors, {p.get('skipped')} skipped", flush=True)  # fmt: skip
            for test, msg in (p.get("failed") or {}).items():
                print(f"  FAILED {test}: {msg[:200]}", flush=True)
        save()
    if "bench" not in args.skip:
        bench_json = logs / "device.json"
        bench_json.unlink(missing_ok=True)
        budget = left() - 15
        cmd = [sys.executable, str(ROOT / "bench" / "bench_device.py"), "--out", str(bench_json),
               "--deadline-s", str(budget - 10), "--md-budget-s", str(budget)]  # fmt: skip
        cmd += ["--quick"] if cpu_mode else []
        cmd += ["--parts", args.bench_parts] if args.bench_parts else []
        run = _run(cmd, env, budget, logs / "bench_device.log")
        print(run["tail"][-2500:], flush=True)
        report["bench"] = json.loads(bench_json.read_text()) if bench_json.exists() else {}
        report["bench"]["rc"], report["bench"]["wall_s"] = run["rc"], run["wall_s"]
    save()
    print(f"wrote {out_dir / result_name} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
