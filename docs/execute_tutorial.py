"""Execute one jupytext tutorial (`# %%` cells) as a notebook would, for the site build.

`python docs/execute_tutorial.py SCRIPT OUT.json` runs the script's code cells in order in one
namespace and writes, per cell, its kind ("markdown" or "code"), its source, what it printed,
the HTML of a last expression that has `_repr_html_` (what a notebook shows under the cell)
and every matplotlib figure left open, as base64 PNG (closed after the cell, as the inline
backend does). A cell that raises prints its traceback and the cell's first line, and the
script exits 1: `docs/hooks.py` turns that into a failed build. Cells are split on lines
starting with `# %%`; a markdown cell's lines lose their leading `# `.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import io
import json
import sys
import traceback
from pathlib import Path


def cells(text: str) -> list[dict]:
    """The script's cells: kind and source (markdown without its comment marks)."""
    out: list[dict] = []
    for line in text.splitlines():
        if line.startswith("# %%"):
            out.append({"kind": "markdown" if "[markdown]" in line else "code", "lines": []})
        elif out:
            out[-1]["lines"].append(line)
    for c in out:
        lines = c.pop("lines")
        if c["kind"] == "markdown":
            lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in lines]
        c["source"] = "\n".join(lines).strip("\n")
    return [c for c in out if c["source"].strip()]


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _figures(shown) -> list[str]:
    """Every figure pyplot holds, then `shown` when it is a figure pyplot does not hold."""
    figs = []
    if "matplotlib.pyplot" in sys.modules:
        import matplotlib.pyplot as plt

        figs = [plt.figure(num) for num in plt.get_fignums()]
    if hasattr(shown, "savefig") and all(shown is not f for f in figs):
        figs.append(shown)
    pngs = [_png(f) for f in figs]
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
    return pngs


def run_cell(source: str, namespace: dict, name: str) -> dict:
    """Run one code cell; its printed text, the last expression's HTML, its figures."""
    tree = ast.parse(source, filename=name)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    out, shown = io.StringIO(), None
    with contextlib.redirect_stdout(out):
        exec(compile(tree, name, "exec"), namespace)
        if last is not None:
            shown = eval(compile(ast.Expression(last.value), name, "eval"), namespace)
    html = shown._repr_html_() if hasattr(shown, "_repr_html_") else None
    if shown is not None and html is None and not hasattr(shown, "savefig"):
        print(repr(shown), file=out)  # a notebook shows a plain value's repr
    return {"stdout": out.getvalue(), "html": html, "images": _figures(shown)}


def main(script: Path, out_json: Path) -> int:
    import matplotlib

    matplotlib.use("Agg")
    parsed = cells(script.read_text())
    namespace: dict = {"__name__": "__main__", "__file__": str(script)}
    for i, cell in enumerate(parsed):
        if cell["kind"] != "code":
            continue
        try:
            cell.update(run_cell(cell["source"], namespace, f"{script.name} cell {i}"))
        except Exception:
            traceback.print_exc()
            first = cell["source"].splitlines()[0]
            print(f"{script.name}: cell {i} ({first!r}) failed", file=sys.stderr)
            return 1
    out_json.write_text(json.dumps(parsed))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
