"""Every third-party module the shipped code imports is a declared dependency.

`pip install -e . && wse demo` must work on a fresh machine, and each package under
packages/ and apps/ installs alone, so a module imported anywhere in a package's src/ (at
the top of a file or inside a function) must come from a distribution in that package's
own `dependencies` (or those of the workspace packages it depends on) and in the root
pyproject's. The oracle is the installed metadata: `importlib.metadata` maps each imported
top-level module to the distribution that provides it. Baselines that only benches and
tests call (torch, transformers) are the listed exceptions, each allowed in named files only.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted([*ROOT.glob("packages/*/pyproject.toml"), ROOT / "apps/cli/pyproject.toml"])
# module -> files (relative to ROOT) that may import it without declaring it: optional
# baselines, imported inside the functions that benches and tests call
OPTIONAL = {
    "torch": {
        "packages/models/src/wse_models/testing.py",
    },
    "transformers": {"packages/models/src/wse_models/testing.py"},
    "dedalus": {"packages/hpc_kernels/src/wse_hpc/fields/dedalus_peer.py"},
}


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower().replace("_", "-")


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text())["project"]


def _imported(nodes) -> set[str]:
    """The top-level modules that absolute imports among `nodes` (AST nodes) name."""
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _imports(src: Path) -> dict[str, set[str]]:
    """third-party top-level module -> files that import it, for absolute imports in
    src/**.py (the standard library and the workspace's own `wse_*` packages left out)"""
    found: dict[str, set[str]] = {}
    for f in src.rglob("*.py"):
        for top in _imported(ast.walk(ast.parse(f.read_text(), str(f)))):
            if (src / f"{top}.py").exists() or (ROOT / "bench" / f"{top}.py").exists():
                continue  # a sibling module (bench/torch_baseline) or a bench a test loads
            found.setdefault(top, set()).add(str(f.relative_to(ROOT)))
    return {
        m: files
        for m, files in found.items()
        if m not in sys.stdlib_module_names and not m.startswith("wse_")
    }


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return md.packages_distributions()


def _provided(mod: str) -> set[str]:
    """the (normalized) names of the installed distributions that provide module `mod`; for
    a module not installed here (a bench extra such as jax_md on a machine that installed only
    the test extra), the distribution named like the module"""
    return {_name(d) for d in _distributions().get(mod, [mod])}


def _undeclared() -> list[str]:
    projects = {_project(p)["name"]: p for p in PACKAGES}
    root_deps = {_name(r) for r in _project(ROOT / "pyproject.toml")["dependencies"]}

    def declared(name: str) -> set[str]:  # a package's deps and its workspace deps'
        deps = {_name(r) for r in _project(projects[name]).get("dependencies", [])}
        for d in deps & projects.keys():
            deps |= declared(d)
        return deps

    problems = []
    for name, path in projects.items():
        deps = declared(name)
        for mod, files in sorted(_imports(path.parent / "src").items()):
            if not files - OPTIONAL.get(mod, set()):
                continue
            provided = _provided(mod)
            if not provided:
                problems.append(f"{name}: {mod} (no installed distribution provides it)")
            elif not provided & deps:
                problems.append(f"{name}: {mod} from {sorted(provided)} not in its dependencies")
            elif not provided & root_deps:
                problems.append(f"{name}: {mod} from {sorted(provided)} not in the root's")
    return problems


def test_every_imported_module_is_a_declared_dependency():
    assert _undeclared() == []


def test_tests_and_benches_import_only_declared_extras():
    # tests run after `pip install -e ".[test]"`, benches with the bench extra as well
    project = _project(ROOT / "pyproject.toml")
    extras = project["optional-dependencies"]
    tests = {_name(r) for r in project["dependencies"] + extras["test"]}
    benches = tests | {_name(r) for r in extras["bench"]}
    groups = [(d, tests) for d in [*ROOT.glob("*/*/tests"), ROOT / "tests"]]
    problems = [
        f"{d.relative_to(ROOT)}: {mod} ({sorted(_provided(mod))})"
        for d, allowed in [*groups, (ROOT / "bench", benches)]
        for mod in _imports(d)
        if not _provided(mod) & allowed
    ]
    assert problems == []


def test_the_check_sees_an_undeclared_import(tmp_path, monkeypatch):
    # the oracle's own oracle: a package that imports a module it does not declare is caught
    pkg = tmp_path / "packages" / "p"
    (pkg / "src" / "p").mkdir(parents=True)
    (pkg / "src" / "p" / "m.py").write_text("def f():\n    import yaml\n    import os\n")
    (pkg / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["numpy"]\n')
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "r"\ndependencies = []\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", [pkg / "pyproject.toml"])
    assert _undeclared() == ["p: yaml from ['pyyaml'] not in its dependencies"]


def _top_level_imports(d: Path) -> dict[str, set[str]]:
    """third-party modules that test modules and conftests under `d` import at collection
    (statements in the module's body, not inside functions)"""
    found: dict[str, set[str]] = {}
    for f in [*d.rglob("test_*.py"), *d.rglob("conftest.py")]:
        for top in _imported(ast.parse(f.read_text(), str(f)).body):
            if top not in sys.stdlib_module_names and not top.startswith("wse_"):
                found.setdefault(top, set()).add(str(f.relative_to(ROOT)))
    return found


def test_every_test_module_collects_with_the_smoke_extra_alone():
    # the Python 3.12+ lane installs `.[smoke]` (no torch) and pytest collects every test
    # module before `-m smoke` deselects: a module-level `import torch` fails that lane
    # (stop 73's CI); baselines are imported inside the tests that need them
    project = _project(ROOT / "pyproject.toml")
    allowed = {
        _name(r) for r in project["dependencies"] + project["optional-dependencies"]["smoke"]
    }
    problems = [
        f"{mod} ({sorted(_provided(mod))}) at the top of {sorted(files)}"
        for d in [*ROOT.glob("*/*/tests"), ROOT / "tests"]
        for mod, files in _top_level_imports(d).items()
        if not _provided(mod) & allowed
    ]
    assert problems == []
