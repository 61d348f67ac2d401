"""Move modules to their concept folders and rewrite every reference to them (issue 33, 5).

    python tools/restructure.py [--md] [--systems] [--dry-run] [--no-ruff]

Contract: for each `old -> new` dotted module name in `MOVES` (and `MD_MOVES` with `--md`,
`SYSTEMS_MOVES` with `--systems`: issue 40's package `wse_systems`, whose tests move by path
in `SYSTEMS_TESTS` and whose emptied `wse_core.systems` folder is removed),
`git mv` the module's file (a module that becomes a package moves to `new/__init__.py`; a
package moves as a folder), create the new folders' `__init__.py` from `FOLDERS` when
missing, then rewrite, in every tracked text file under `SCOPE`:

- dotted names: `wse_core.perf`, `wse_core.perf.Phase`, `"wse_core.perf.x"` in monkeypatch
  targets, entry points and docs -> the new name (one pass over all moves, so a rewrite never
  feeds another);
- `from PARENT import old_base [as x]` (the module imported by its short name, possibly among
  other names, possibly in parentheses over several lines) -> `from NEW_PARENT import
  new_base as x`, keeping the local name the code uses (`as old_base` when the short name
  changed);
- file paths: `wse_core/trace_png.py` -> `wse_core/trace/png.py`, `wse_core/serving/` ->
  `wse_core/systems/serving/`;
- short names in backticks (`SHORT`, `MD_SHORT`): `` `nlist.drift_fn` `` ->
  `` `neighbours.drift_fn` ``, `` `fabric_reduce` `` -> `` `fabric.reduce` ``.

It is idempotent: a move whose old file is gone and new file present is skipped, and no new
name contains an old one, so a second run changes nothing. Re-run it on a later main after
merging other branches: it moves nothing and rewrites the references they added. Docstring lines a
rename pushed past 100 columns are rewrapped (`rewrap`). Last it runs `ruff check --fix
--select I` and `ruff format` on the files it changed (import order).
Exit 1 when a move's old and new files both exist (resolve by hand), else 0.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Where each top-level package's source lives.
SRC = {
    "wse_core": "packages/wse_core/src",
    "wse_models": "packages/models/src",
    "wse_trainer": "packages/trainer/src",
    "wse_inference": "packages/inference/src",
    "wse_hpc": "packages/hpc_kernels/src",
    "wse_cli": "apps/cli/src",
    "wse_systems": "packages/systems/src",
}

MOVES: dict[str, str] = {
    # hw/: the machine as the emulator holds it
    "wse_core.spec": "wse_core.hw.spec",
    "wse_core.dtypes": "wse_core.hw.dtypes",
    "wse_core.simd": "wse_core.hw.simd",
    "wse_core.defects": "wse_core.hw.defects",
    "wse_core.sram": "wse_core.hw.sram",
    "wse_core.traffic": "wse_core.hw.traffic",
    "wse_core.wafer": "wse_core.hw.wafer",
    # fabric/: the one API that moves data between PEs (wse_core.fabric stays the API)
    "wse_core.fabric_blocks": "wse_core.fabric.blocks",
    "wse_core.fabric_ledger": "wse_core.fabric.ledger",
    "wse_core.fabric_reduce": "wse_core.fabric.reduce",
    # cost/: the performance model
    "wse_core.perf": "wse_core.cost.perf",
    "wse_core.pricing": "wse_core.cost.pricing",
    "wse_core.work": "wse_core.cost.work",
    "wse_core.mechanisms": "wse_core.cost.mechanisms",
    "wse_core.calibration": "wse_core.cost.calibration",
    "wse_core.assumptions": "wse_core.cost.assumptions",
    "wse_core.report": "wse_core.cost.report",
    "wse_core.collectives": "wse_core.cost.collectives",
    "wse_core.stencil_cost": "wse_core.cost.stencil",
    # trace/: per-PE views (wse_core.trace stays the API)
    "wse_core.trace_schema": "wse_core.trace.schema",
    "wse_core.trace_png": "wse_core.trace.png",
    "wse_core.pipeline_trace": "wse_core.trace.pipeline",
    # systems/: whole machines and workloads beyond one kernel
    "wse_core.transformer": "wse_core.systems.transformer",
    "wse_core.pipeline_plan": "wse_core.systems.pipeline",
    "wse_core.decoder_cost": "wse_core.systems.decoder",
    "wse_core.gpu": "wse_core.systems.gpu",
    "wse_core.economics": "wse_core.systems.economics",
    "wse_core.serving": "wse_core.systems.serving",
    # host/: the machine the emulator runs on
    "wse_core.runtime": "wse_core.host.runtime",
    "wse_core.distributed": "wse_core.host.distributed",
    "wse_core.hostmem": "wse_core.host.memory",
    # studies/: experiments, their result type and the assumption sweeps
    "wse_core.experiment": "wse_core.studies.experiment",
    "wse_core.sweeps": "wse_core.studies.sweeps",
    "wse_hpc.stencil.experiments": "wse_hpc.studies.stencil_bicgstab",
    "wse_hpc.tlrmvm.experiments": "wse_hpc.studies.ltaief23_tlrmvm",
    "wse_hpc.md.experiments": "wse_hpc.studies.santos24_md",
    "wse_trainer.experiment": "wse_trainer.studies.weight_streaming",
    "wse_cli.tco_training": "wse_cli.studies.tco_training",
}

# MD's neighbour lists: applied with --md only, after the MD rewrite (i34md2) has merged.
MD_MOVES: dict[str, str] = {
    "wse_hpc.md.nlist": "wse_hpc.md.neighbours",
    "wse_hpc.md.list_build": "wse_hpc.md.neighbours.build",
    "wse_hpc.md.list_plan": "wse_hpc.md.neighbour_plan",
}

# Issue 40: one LLM-systems package above wse_core (applied with --systems only): wse_core's
# decoder shapes, pipeline plans, GPUs, economics and serving, the pipeline trace and the
# calibration's LLM check; the trainer's predicted step and the SRAM plan it reads; the CLI's
# planners and their experiment.
SYSTEMS_MOVES: dict[str, str] = {
    "wse_core.systems.transformer": "wse_systems.transformer",
    "wse_core.systems.pipeline": "wse_systems.pipeline",
    "wse_core.systems.decoder": "wse_systems.decoder",
    "wse_core.systems.gpu": "wse_systems.gpu",
    "wse_core.systems.economics": "wse_systems.economics",
    "wse_core.systems.serving": "wse_systems.serving",
    "wse_core.trace.pipeline": "wse_systems.trace",
    "wse_core.studies.calibration_check": "wse_systems.studies.calibration_check",
    "wse_trainer.performance": "wse_systems.training.performance",
    "wse_trainer.layer_cost": "wse_systems.training.layer_cost",
    "wse_trainer.stream_cost": "wse_systems.training.stream_cost",
    "wse_trainer.stall": "wse_systems.training.stall",
    "wse_trainer.placement": "wse_systems.training.placement",
    "wse_trainer.plan": "wse_systems.training.plan",
    "wse_trainer.chunks": "wse_systems.training.chunks",
    "wse_cli.planning": "wse_systems.planning.train",
    "wse_cli.serving_plan": "wse_systems.planning.infer",
    "wse_cli.studies.tco_training": "wse_trainer.studies.tco_training",
}
# Test files that move with them (--systems): old path -> new path.
SYSTEMS_TESTS: dict[str, str] = {
    "packages/wse_core/tests/test_core_serving.py": (
        "packages/systems/tests/test_systems_serving.py"
    ),
    "packages/wse_core/tests/test_core_gpu_economics.py": (
        "packages/systems/tests/test_systems_gpu_economics.py"
    ),
    "packages/wse_core/tests/test_core_transformer.py": (
        "packages/systems/tests/test_systems_transformer.py"
    ),
}
# Folders a move empties (only their __init__.py left): removed.
SYSTEMS_EMPTIED = ["wse_core.systems", "wse_cli.studies"]

# Short names in backticks (`nlist.drift_fn`, `fabric_reduce`) in docs and docstrings.
SHORT: dict[str, str] = {
    "fabric_blocks": "fabric.blocks",
    "fabric_ledger": "fabric.ledger",
    "fabric_reduce": "fabric.reduce",
    "trace_schema": "trace.schema",
    "trace_png": "trace.png",
    "pipeline_trace": "trace.pipeline",
    "pipeline_plan": "systems.pipeline",
    "decoder_cost": "systems.decoder",
    "stencil_cost": "cost.stencil",
    "hostmem": "host.memory",
}
MD_SHORT: dict[str, str] = {
    "nlist": "neighbours",
    "list_build": "neighbours.build",
    "list_plan": "neighbour_plan",
}

# Modules that become packages: their code moves to `<new>/__init__.py`.
# (A module that gains submodules, such as `wse_core.fabric`, moves to its __init__.py too.)
BECOME_PACKAGES = {"wse_hpc.md.neighbours"}

# The docstring of each new folder's __init__.py (one sentence a folder).
FOLDERS: dict[str, str] = {
    "wse_core.hw": "The wafer as the emulator holds it: the spec and its dtype and SIMD tables, "
    "defects and their repair, the SRAM and traffic ledgers, and the PE grid on a jax Mesh.",
    "wse_core.cost": "The performance model: work by mechanism, its pricing, every constant "
    "with its source, the one calibration, assumptions, collectives and the RunReport.",
    "wse_core.systems": "Whole machines and workloads beyond one kernel: the decoder shape, a "
    "model's pipeline over wafer regions and its decode cost, GPU clusters, power and cost, "
    "and serving on both.",
    "wse_core.host": "The machine the emulator runs on: JAX devices and caches, multi-process "
    "runs, and host memory checked before allocating.",
    "wse_hpc.studies": "The HPC kernels' experiments (`wse experiments run NAME`): the "
    "stencil and BiCGSTAB, TLR-MVM and EAM MD against their papers.",
    "wse_cli.studies": "Experiments that need several packages at once and so live in the CLI.",
    "wse_systems.training": "The predicted training step: the SRAM plan, the placement of a "
    "layer, its work, the weight and gradient streams, where they stall, and N systems.",
    "wse_systems.planning": "`wse plan`'s answers: wafers against GPUs for training and "
    "serving, from a resolved model and wafer (the CLI parses, calls and prints).",
    "wse_systems.studies": "Experiments of whole systems: the cost model's calibration with its "
    "LLM decode check.",
}

SCOPE = ["packages", "apps", "bench", "tools", "tests", "docs", ".ci"]
SCOPE_FILES = ["README.md", "WORKSPACE.md", "pyproject.toml", "conftest.py"]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".ini", ".yaml", ".yml", ".sh", ".txt", ""}
SELF = Path(__file__).resolve()


def module_file(name: str) -> Path | None:
    """The file (or package folder) of a dotted module name, if it exists."""
    top = name.split(".")[0]
    base = ROOT / SRC[top] / Path(*name.split("."))
    if base.is_dir():
        return base
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    return None


def target_file(old: Path, new: str) -> Path:
    top = new.split(".")[0]
    base = ROOT / SRC[top] / Path(*new.split("."))
    if old.is_dir():
        return base
    return base / "__init__.py" if new in BECOME_PACKAGES else base.with_suffix(".py")


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True)
    return done.stdout


def ensure_package(name: str, dry: bool) -> None:
    """Create `name`'s folder and __init__.py (docstring from FOLDERS) and its parents'."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        pkg = ".".join(parts[:i])
        init = ROOT / SRC[parts[0]] / Path(*parts[:i]) / "__init__.py"
        if init.exists() or pkg not in FOLDERS:
            continue
        print(f"create {init.relative_to(ROOT)}")
        if not dry:
            init.parent.mkdir(parents=True, exist_ok=True)
            body = textwrap.fill(f'"""{FOLDERS[pkg]}"""', width=100)
            init.write_text(body + "\n")
            git("add", str(init))


def promote(name: str, dry: bool) -> None:
    """A module `name.py` that is to hold submodules becomes `name/__init__.py`."""
    path = module_file(name)
    if path is not None and path.suffix == ".py" and path.name != "__init__.py":
        dest = path.with_suffix("") / "__init__.py"
        print(f"git mv {path.relative_to(ROOT)} {dest.relative_to(ROOT)}")
        if not dry:
            dest.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(path), str(dest))


def move(moves: dict[str, str], dry: bool) -> int:
    conflicts = 0
    for old, new in moves.items():
        src = module_file(old)
        dest_existing = module_file(new)
        if src is None:
            if dest_existing is None:
                print(f"skip {old}: neither it nor {new} exists")
            continue
        dest = target_file(src, new)
        if dest.exists():
            print(f"CONFLICT {old} -> {new}: both {src} and {dest} exist", file=sys.stderr)
            conflicts += 1
            continue
        parent = new.rpartition(".")[0]
        ensure_package(parent, dry)
        promote(parent, dry)
        print(f"git mv {src.relative_to(ROOT)} {dest.relative_to(ROOT)}")
        if not dry:
            dest.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(src), str(dest))
    return conflicts


def move_files(files: dict[str, str], dry: bool) -> int:
    """`git mv` each test file `old -> new` (paths from the root); conflicts counted."""
    conflicts = 0
    for old, new in files.items():
        src, dest = ROOT / old, ROOT / new
        if not src.exists():
            continue
        if dest.exists():
            print(f"CONFLICT {old} -> {new}: both exist", file=sys.stderr)
            conflicts += 1
            continue
        print(f"git mv {old} {new}")
        if not dry:
            dest.parent.mkdir(parents=True, exist_ok=True)
            git("mv", old, new)
    return conflicts


def drop_emptied(names: list[str], dry: bool) -> None:
    """`git rm` the `__init__.py` of each package a move left with nothing else in it."""
    for name in names:
        folder = ROOT / SRC[name.split(".")[0]] / Path(*name.split("."))
        left = [p for p in folder.glob("*") if p.name not in ("__init__.py", "__pycache__")]
        if folder.is_dir() and not left:
            print(f"git rm {(folder / '__init__.py').relative_to(ROOT)}")
            if not dry:
                git("rm", "-q", str(folder / "__init__.py"))


def dotted_pattern(moves: dict[str, str]) -> re.Pattern[str]:
    names = sorted(moves, key=len, reverse=True)
    alt = "|".join(re.escape(n) for n in names)
    return re.compile(rf"(?<![\w.])({alt})(?![\w])")


def path_pairs(moves: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    """`pkg/old.py` -> `pkg/new.py` (or `new/__init__.py`) and `pkg/old/` -> `pkg/new/`;
    first with their source folders (`packages/x/src/pkg/old.py`), for moves between
    packages."""
    out = []
    for old, new in moves.items():
        o = f"{SRC[old.split('.')[0]]}/{old.replace('.', '/')}"
        n = f"{SRC[new.split('.')[0]]}/{new.replace('.', '/')}"
        n_file = f"{n}/__init__.py" if new in BECOME_PACKAGES else f"{n}.py"
        out.append((re.compile(rf"(?<![\w.]){re.escape(o)}\.py\b"), n_file))
        out.append((re.compile(rf"(?<![\w.]){re.escape(o)}/"), f"{n}/"))
    for old, new in moves.items():
        o, n = old.replace(".", "/"), new.replace(".", "/")
        n_file = f"{n}/__init__.py" if new in BECOME_PACKAGES else f"{n}.py"
        out.append((re.compile(rf"(?<![\w.]){re.escape(o)}\.py\b"), n_file))
        out.append((re.compile(rf"(?<![\w.]){re.escape(o)}/"), f"{n}/"))
    return out


def rewrite_from_imports(text: str, moves: dict[str, str]) -> str:
    """`from P import a, old as x` where P.old moved -> split into one statement per move."""
    if "import" not in text:
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        moved = [a for a in node.names if f"{node.module}.{a.name}" in moves]
        if not moved:
            continue
        indent = " " * node.col_offset
        kept = [a for a in node.names if a not in moved]
        stmts = []
        if kept:
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in kept)
            stmts.append(f"from {node.module} import {names}")
        for a in moved:
            parent, _, base = moves[f"{node.module}.{a.name}"].rpartition(".")
            local = a.asname or a.name
            stmts.append(f"from {parent} import {base}" + (f" as {local}" if local != base else ""))
        new_src = ("\n" + indent).join(stmts)
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, new_src))
    for l0, c0, l1, c1, new_src in sorted(edits, reverse=True):
        head = lines[l0 - 1][:c0]
        tail = lines[l1 - 1][c1:]
        lines[l0 - 1 : l1] = [head + new_src + tail]
    return "".join(lines)


def _docstring_lines(tree: ast.AST) -> list[tuple[int, int]]:
    """(first, last) 1-based lines of each docstring-like string statement."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, str) and node.end_lineno:
                out.append((node.lineno, node.end_lineno))
    return sorted(out, reverse=True)


def rewrap(text: str, width: int = 100) -> str:
    """Docstring lines a rename pushed past `width`: the overflowing words move to the start
    of the next prose line of the same paragraph, or to a new line (a bullet's continuation
    indented under its text). Table rows (`|`) are left alone."""
    if not any(len(line) > width for line in text.splitlines()):
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.split("\n")
    for first, last in _docstring_lines(tree):
        i, end = first - 1, last - 1
        while i <= end:
            line = lines[i]
            if len(line) <= width or line.lstrip().startswith("|") or " " not in line.strip():
                i += 1
                continue
            cut = line.rfind(" ", 0, width + 1)
            while cut > 0 and line[:cut].strip() == "":
                cut = -1
            if cut <= 0:
                i += 1
                continue
            head, rest = line[:cut].rstrip(), line[cut + 1 :]
            body = line.lstrip()
            indent = line[: len(line) - len(body)]
            nxt = lines[i + 1] if i + 1 < end else None  # never the closing line
            joinable = nxt is not None and nxt.strip() and not re.match(r"\s*([-*|]|\d+\.)\s", nxt)
            if joinable and not rest.rstrip().endswith('"""'):
                lines[i], lines[i + 1] = (
                    head,
                    nxt[: len(nxt) - len(nxt.lstrip())] + rest + " " + nxt.lstrip(),
                )
            else:
                cont = indent + ("  " if re.match(r"([-*]|\d+\.)\s", body) else "")
                lines[i : i + 1] = [head, cont + rest]
                end += 1
            i += 1
    return "\n".join(lines)


def scope_files() -> list[Path]:
    tracked = git("ls-files", "-co", "--exclude-standard", *SCOPE, *SCOPE_FILES).split("\n")
    out = []
    for rel in filter(None, tracked):
        path = ROOT / rel
        if path.resolve() == SELF or not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        out.append(path)
    return out


def rewrite(
    moves: dict[str, str], short: dict[str, str], dry: bool, files: dict[str, str] | None = None
) -> list[Path]:
    pattern = dotted_pattern(moves)
    paths = path_pairs(moves) + [
        (re.compile(rf"(?<![\w./]){re.escape(o)}\b"), n) for o, n in (files or {}).items()
    ]
    alt = "|".join(re.escape(n) for n in sorted(short, key=len, reverse=True))
    short_pattern = re.compile(rf"(?<=`)({alt})(?=[`.(])")
    changed = []
    for path in scope_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite_from_imports(text, moves) if path.suffix == ".py" else text
        new = pattern.sub(lambda m: moves[m.group(1)], new)
        for pat, repl in paths:
            new = pat.sub(repl, new)
        if short:
            new = short_pattern.sub(lambda m: short[m.group(1)], new)
        if new != text and path.suffix == ".py":
            new = rewrap(new)
        if new != text:
            changed.append(path)
            print(f"rewrite {path.relative_to(ROOT)}")
            if not dry:
                path.write_text(new)
    return changed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", action="store_true", help="also MD's neighbour-list moves")
    ap.add_argument("--systems", action="store_true", help="also issue 40's wse_systems moves")
    ap.add_argument("--dry-run", action="store_true", help="print, change nothing")
    ap.add_argument("--no-ruff", action="store_true", help="skip ruff on the changed files")
    args = ap.parse_args()
    moves = dict(MOVES) | (MD_MOVES if args.md else {}) | (SYSTEMS_MOVES if args.systems else {})
    files = SYSTEMS_TESTS if args.systems else {}
    conflicts = move(moves, args.dry_run) + move_files(files, args.dry_run)
    if args.systems:
        drop_emptied(SYSTEMS_EMPTIED, args.dry_run)
    # A module whose move was skipped for a conflict is not rewritten either.
    short = dict(SHORT) | (MD_SHORT if args.md else {})
    changed = rewrite(moves, short, args.dry_run, files)
    py = [str(p) for p in changed if p.suffix == ".py"]
    if py and not args.dry_run and not args.no_ruff:
        subprocess.run(["ruff", "check", "--fix", "--select", "I", "-q", *py], cwd=ROOT)
        subprocess.run(["ruff", "format", "-q", *py], cwd=ROOT)
    print(f"{len(changed)} files rewritten, {conflicts} conflicts")
    return 1 if conflicts else 0


if __name__ == "__main__":
    sys.exit(main())
