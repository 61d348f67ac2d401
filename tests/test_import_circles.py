"""No import circles in any of the stack's packages (wse_core, wse_systems, wse_models,
wse_inference, wse_trainer, wse_hpc and the wse CLI); no wse_core module named with another's
prefix (a folder, not `fabric_*`); the layers point one way (wse_core imports no other
package, wse_systems only wse_core).

An edge A -> B is any `import B` / `from B import x` in module A, at module level or inside a
function (a deferred import is still a dependency; only imports under `if TYPE_CHECKING:` are
left out, since they never run). `from P import x` where `P.x` is a module is an edge to that
module, else to P itself (its __init__). Relative imports are resolved. A circle is a strongly
connected component of more than one module (Tarjan's algorithm); the test prints each one.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "wse_core": ROOT / "packages/wse_core/src/wse_core",
    "wse_systems": ROOT / "packages/systems/src/wse_systems",
    "wse_models": ROOT / "packages/models/src/wse_models",
    "wse_inference": ROOT / "packages/inference/src/wse_inference",
    "wse_trainer": ROOT / "packages/trainer/src/wse_trainer",
    "wse_hpc": ROOT / "packages/hpc_kernels/src/wse_hpc",
    "wse_cli": ROOT / "apps/cli/src/wse_cli",
}


def _modules(pkg: str, src: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = [pkg, *path.relative_to(src).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _targets(node: ast.AST, module: str, is_pkg: bool, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_pkg else module.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join([*here, base] if base else here)
    subs = [f"{base}.{a.name}" for a in node.names]
    return [s if s in known else base for s in subs]


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """module -> the modules of the three packages it imports (see the module docstring)."""
    files = {m: p for pkg, src in PACKAGES.items() for m, p in _modules(pkg, src).items()}
    known = set(files)
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_only(tree)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
                for target in _targets(node, module, is_pkg, known):
                    while target and target not in known:  # `import a.b.c` of a name in a.b
                        target = target.rpartition(".")[0]
                    if target and target != module:
                        graph[module].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_circles_finds_a_circle_by_hand():
    """The detector against graphs drawn by hand: a -> b -> c -> a is one circle; a chain and
    a self-import are none."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert circles({"a": {"a"}}) == []
    two = circles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}})
    assert sorted(two) == [["a", "b"], ["c", "d"]]


def test_import_graph_reads_the_packages():
    g = import_graph()
    assert "wse_models.config" in g and "wse_core.hw.spec" in g["wse_models.config"]
    assert "wse_inference.engine" in g["wse_inference.mock"]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_circles(package):
    found = [c for c in circles(import_graph()) if any(m.startswith(package) for m in c)]
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def prefixed_siblings(modules: list[str]) -> list[tuple[str, str]]:
    """(a, b) for modules of one folder where b is named a_...: a prefix standing in for a
    folder (issue 33). `modules` are dotted names; a package counts as a module of its
    parent folder."""
    out = []
    for a in modules:
        parent, _, base = a.rpartition(".")
        for b in modules:
            b_parent, _, b_base = b.rpartition(".")
            if b_parent == parent and b_base.startswith(base + "_"):
                out.append((a, b))
    return sorted(out)


def test_prefixed_siblings_by_hand():
    mods = ["p.fabric", "p.fabric_blocks", "p.trace", "p.x.trace_png", "p.x.fabric", "p.y"]
    assert prefixed_siblings(mods) == [("p.fabric", "p.fabric_blocks")]
    assert prefixed_siblings(["p.fabric", "p.fabric.blocks", "p.studies.fabric_cost"]) == []


def test_wse_core_has_no_module_named_with_anothers_prefix():
    mods = list(_modules("wse_core", PACKAGES["wse_core"]))
    assert len(mods) > 30 and "wse_core.fabric.blocks" in mods
    found = prefixed_siblings(mods)
    assert not found, "use a folder, not a prefix: " + ", ".join(f"{a} / {b}" for a, b in found)


# What each package may import of the stack's own packages (WORKSPACE.md's table).
MAY_IMPORT = {
    "wse_core": {"wse_core"},
    "wse_systems": {"wse_core", "wse_systems"},
}


def test_the_layers_point_one_way():
    g = import_graph()
    found = [
        f"{m} -> {t}"
        for m, targets in g.items()
        for t in targets
        if m.split(".")[0] in MAY_IMPORT and t.split(".")[0] not in MAY_IMPORT[m.split(".")[0]]
    ]
    assert any(t.startswith("wse_core") for t in g["wse_systems.decoder"])
    assert not found, "imports against the layers:\n" + "\n".join(sorted(found))
