"""Snapshot what a representative set of `wse` commands print and write, to diff two trees.

    python tools/output_snapshot.py snap DIR [--demo] [--only NAME,...]
    python tools/output_snapshot.py diff OLD_DIR NEW_DIR [--moves]

`snap` runs each command of `COMMANDS` from the tree this file is in (PYTHONPATH set to its
`packages/*/src` and `apps/cli/src`), 8 virtual devices, as a subprocess with a timeout, and
writes `DIR/<name>.txt`: the exit code, stdout and stderr as they came (the scratch folder's
and the tree's paths replaced). Files a command writes (experiments' results.json, traces
`.npz`) follow in the same file: JSON as sorted JSON, each `.npz` array as its shape, dtype
and sum. `diff` normalises both sides (below), compares them word by word (rich rewraps a
line whose timing got longer), prints a unified diff (a word a line) per command and exits 1
when any differs; `--moves` first renames, in the old snapshot, the module names that
tools/restructure.py moves (output that names a module then matches).

Normalised away at diff time (they differ run to run): ports, numbers on lines that say
`measured` or `emulated`, timing columns of markdown tables, and the values of timing keys
and phrases (`TIMING_KEYS`, `TIMING_TEXT`). Everything else (predictions, errors against
oracles, counts, tables) must match.
`--demo` adds `wse demo --quick` (over 10 minutes under a load of 8). Without the demo a run
on the 2-core machine takes 5 to 7 minutes under a load of 8.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

# A name, the arguments after `wse` (split on spaces), and the files it writes (relative to the
# scratch dir, written `{T}`). Setup steps (potential, operator) come before their users.
COMMANDS: list[tuple[str, str, list[str]]] = [
    ("wafer_info_wse3", "wafer info --preset wse3 --json", []),
    ("wafer_info_demo", "wafer info --preset demo", []),
    ("wafer_defects", "wafer defects --preset small --defect-rate 0.01", []),
    ("plan_train", "plan train --model llama3_8b --tokens 1e12 --json", []),
    ("plan_infer", "plan infer --model llama3_8b --json", []),
    ("train_validate", "train tiny --validate_only --trace {T}/train.npz", ["train.npz"]),
    (
        "stencil_jacobi",
        "hpc stencil --kind jacobi --grid 12 10 8 --preset small --steps 5 --json "
        "--trace {T}/stencil.npz",
        ["stencil.npz"],
    ),
    (
        "stencil_bicgstab",
        "hpc stencil --kind bicgstab --grid 12 10 8 --preset small --tol 1e-3 --json",
        [],
    ),
    (
        "stencil_wave25",
        "hpc stencil --kind wave25 --grid 12 10 8 --preset small --steps 2 --block-z 4",
        [],
    ),
    ("md_potential", "hpc md potential --elements Cu --out {T}/cu.eam.alloy --knots 500", []),
    (
        "md_run",
        "hpc md --lattice fcc --element Cu --a 3.615 --cells 4 4 4 --potential "
        "{T}/cu.eam.alloy --steps 3 --thermo-every 1 --preset small --json --trace {T}/md.npz",
        ["md.npz"],
    ),
    ("tlr_compress", "hpc tlrmvm compress --n 256 --nb 32 --out {T}/op.npz --json", []),
    (
        "tlr_run",
        "hpc tlrmvm run --operator {T}/op.npz --preset small --json --trace {T}/tlr.npz",
        ["tlr.npz"],
    ),
    (
        "infer_generate",
        "infer generate --model_dir {T}/model --prompt-ids 5,6,7 --max_tokens 4 "
        "--temperature 0 --stages 2 --json --trace {T}/infer.npz",
        ["infer.npz"],
    ),
    ("view", "view {T}/stencil.npz --out {T}/stencil.html", []),
    ("experiments_list", "experiments list", []),
    ("experiments_assumptions", "experiments assumptions", []),
    (
        "exp_wafer_yield",
        "experiments run wafer-yield --quick --out {T}/exp",
        ["exp/wafer-yield/results.json", "exp/wafer-yield/table.md"],
    ),
    (
        "exp_calibration",
        "experiments run cost-model-calibration --quick --out {T}/exp",
        ["exp/cost-model-calibration/results.json", "exp/cost-model-calibration/table.md"],
    ),
    (
        "exp_fabric_collectives",
        "experiments run fabric-collectives --quick --out {T}/exp",
        ["exp/fabric-collectives/results.json"],
    ),
]
DEMO = ("demo", "demo --quick --out {T}/demo", [])
TIMEOUT_S = {"demo": 1800}  # per command; others 600 s

# JSON keys whose values are measured times (or follow from them) or host facts.
TIMING_KEYS = re.compile(
    r"(wall|measured|elapsed|compile|compress_s|emulat|host|ttft|decode_s|prefill_s|tpot|gemv_s|"
    r"speedup|"
    r"timesteps_per_s|tokens_per_s|_ms$|load|utc)",
    re.I,
)
# Text: a number followed by a time unit, or after a timing word.
TIMING_TEXT = [
    (re.compile(r"(?<![\w.-])\d+(\.\d+)?(e[-+]?\d+)?\s?(s|ms|µs|us|ns|min)\b"), "<TIME>"),
    (re.compile(r"(emulated|wall|measured|elapsed|took)\s+[\d.]+(e[-+]?\d+)?"), r"\1 <N>"),
    (re.compile(r"\d+(\.\d+)?\s?(steps|tokens|timesteps|it|cells)/s\b"), "<RATE>"),
    (re.compile(r"(127\.0\.0\.1|localhost|0\.0\.0\.0):\d+"), r"\1:<PORT>"),
    (re.compile(r"\b(Rate|GlobalRate|TokenRate|StallFraction)=[\d.]+"), r"\1=<N>"),
    (re.compile(r"^Performance: .*"), "Performance: <N>"),
    (re.compile(r"\bstalled [\d.]+%"), "stalled <N>%"),
    (re.compile(r"\bstream: \d+ chunks"), "stream: <N> chunks"),  # chunking follows timing
    (re.compile(r"[\d.]+ (output tokens/s|req/s)"), r"<N> \1"),
    (re.compile(r"\b(queue|prompt|completion|total) [\d.]+"), r"\1 <N>"),
    (re.compile(r"\b(p50|p99|p50/p99) [\d./]+"), r"\1 <N>"),
]


def _mask(obj, key=""):
    if isinstance(obj, dict):
        if TIMING_KEYS.search(str(obj.get("name", ""))) and "value" in obj:  # a measured row
            obj = {**obj, "value": "<TIME>"}
        return {k: _mask(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_mask(v, key) for v in obj]
    if TIMING_KEYS.search(key) and isinstance(obj, int | float) and not isinstance(obj, bool):
        return "<TIME>"
    if isinstance(obj, str):
        return _normalise_text(obj)
    return obj


def _normalise_text(text: str) -> str:
    for pattern, repl in TIMING_TEXT:
        text = pattern.sub(repl, text)
    return text


def _table_row(line: str, masked: set[int]) -> str:
    cells = line.split("|")
    return "|".join("<TIME>" if i in masked and c.strip() else c for i, c in enumerate(cells))


def _normalise(text: str) -> str:
    start = text.find("{")
    if start >= 0 and not text[:start].strip():  # one JSON document (pretty-printed or not)
        try:
            data = json.loads(text)
            return json.dumps(_mask(data), indent=1, sort_keys=True)
        except json.JSONDecodeError:
            pass
    lines = []
    masked: set[int] = set()  # the timing columns of the markdown table being read
    rows = text.splitlines()
    for i, line in enumerate(rows):
        if line.startswith("|"):
            cells = line.split("|")
            after = rows[i + 1] if i + 1 < len(rows) else ""
            if after.startswith("|") and set(after) <= set("|-: "):  # a header
                masked = {j for j, c in enumerate(cells) if TIMING_KEYS.search(c.strip())}
            elif not set(line) <= set("|-: "):
                measured_row = len(cells) > 2 and TIMING_KEYS.search(cells[1].strip())
                line = _table_row(line, masked | {2} if measured_row else masked)
            lines.append(_normalise_text(line.rstrip()))
            continue
        masked = set()
        if re.search(r"\b(measured|emulated)\b", line):
            line = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "<N>", line)
        stripped = line.strip()
        if stripped.startswith("{") and stripped.endswith("}"):
            try:
                lines.append(json.dumps(_mask(json.loads(stripped)), indent=1, sort_keys=True))
                continue
            except json.JSONDecodeError:
                pass
        lines.append(_normalise_text(line.rstrip()))
    return "\n".join(lines)


def _summarise(path: Path, scratch: Path) -> str:
    if not path.exists():
        return f"--- {path.relative_to(scratch)}: missing"
    head = f"--- {path.relative_to(scratch)}"
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            rows = []
            for k in sorted(z.files):
                a = z[k]
                total = a.sum() if a.dtype.kind in "biuf" else a.size
                rows.append(f"{k}: {a.shape} {a.dtype} sum={float(total):.9g}")
        return head + "\n" + "\n".join(rows)
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        return head + "\n" + json.dumps(data, indent=1, sort_keys=True)
    return head + "\n" + path.read_text()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WSE_", "XLA_FLAGS"))}
    srcs = sorted(str(p) for p in (ROOT / "packages").glob("*/src"))
    env["PYTHONPATH"] = os.pathsep.join([*srcs, str(ROOT / "apps/cli/src")])
    env.update(WSE_DEVICES="8", COLUMNS="120", NO_COLOR="1", TERM="dumb")
    return env


def _make_model(scratch: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from wse_inference.testing import save_tiny_model;"
        "save_tiny_model(Path(sys.argv[1]) / 'model' / 'hf', n_layers=2)"
    )
    subprocess.run([PY, "-c", code, str(scratch)], env=_env(), check=True, timeout=300)


def snap(out: Path, *, demo: bool, only: set[str] | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="wse_snap_"))
    try:
        _make_model(scratch)
        commands = COMMANDS + ([DEMO] if demo else [])
        for name, args, files in commands:
            if only and name not in only:
                continue
            argv = args.replace("{T}", str(scratch)).split()
            t0 = time.perf_counter()
            try:
                done = subprocess.run(
                    [PY, "-m", "wse_cli", *argv],
                    capture_output=True,
                    text=True,
                    env=_env(),
                    timeout=TIMEOUT_S.get(name, 600),
                    cwd=scratch,
                )
                body = [
                    f"$ wse {args}",
                    f"exit {done.returncode}",
                    "--- stdout",
                    done.stdout,
                    "--- stderr",
                    done.stderr,
                ]
            except subprocess.TimeoutExpired:
                body = [f"$ wse {args}", "TIMEOUT"]
            body += [_summarise(scratch / f, scratch) for f in files]
            text = "\n".join(body).replace(str(scratch), "{T}").replace(str(ROOT), "{ROOT}")
            (out / f"{name}.txt").write_text(text + "\n")
            print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _sections(path: Path) -> list[str]:
    """A snapshot file normalised section by section (a section starts with `--- `)."""
    if not path.exists():
        return ["<missing>"]
    out: list[str] = []
    section: list[str] = []
    for line in [*path.read_text().splitlines(), "--- end"]:
        if line.startswith("--- ") or line.startswith("$ wse") or line.startswith("exit "):
            out += _normalise("\n".join(section)).splitlines() if section else []
            out.append(line)
            section = []
        else:
            section.append(line)
    return out[:-1]


def _renamer():
    """The restructure's rename of dotted module names (tools/restructure.py), for `--moves`."""
    spec = importlib.util.spec_from_file_location("restructure", ROOT / "tools/restructure.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    moves = {**mod.MOVES, **mod.MD_MOVES, **mod.SYSTEMS_MOVES}
    pattern = mod.dotted_pattern(moves)
    return lambda line: pattern.sub(lambda m: moves[m.group(1)], line)


def diff(old: Path, new: Path, *, moves: bool = False) -> int:
    rename = _renamer() if moves else (lambda line: line)
    differ = 0
    for name in sorted({p.name for p in old.glob("*.txt")} | {p.name for p in new.glob("*.txt")}):
        a, b = [rename(x) for x in _sections(old / name)], _sections(new / name)
        # rich wraps lines by their length, which timings change: compare word by word
        a, b = (" ".join(x).split() for x in (a, b))
        lines = list(difflib.unified_diff(a, b, str(old / name), str(new / name), lineterm=""))
        if lines:
            differ += 1
            print("\n".join(lines))
    print(f"{differ} of the snapshots differ")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snap")
    s.add_argument("dir", type=Path)
    s.add_argument("--demo", action="store_true")
    s.add_argument("--only", default="")
    d = sub.add_parser("diff")
    d.add_argument("old", type=Path)
    d.add_argument("new", type=Path)
    d.add_argument("--moves", action="store_true", help="rename old module names first")
    args = ap.parse_args()
    if args.cmd == "snap":
        snap(args.dir, demo=args.demo, only=set(filter(None, args.only.split(","))) or None)
        return 0
    return diff(args.old, args.new, moves=args.moves)


if __name__ == "__main__":
    sys.exit(main())
