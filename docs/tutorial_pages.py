"""The site build's executed tutorials and experiments page (used by `docs/hooks.py`).

Tutorials. `execute_all(names)` runs each `docs/tutorials/NAME.py` in its own Python process
(`execute_tutorial.py`, at most `WSE_DOCS_JOBS` at once, default 2) at the size CI runs
(`WSE_TUTORIAL_SIZE`, unset: small; `full`: the `wse demo` sizes) and returns its cells with
their outputs; a tutorial that fails raises `TutorialError` with its traceback, so
`mkdocs build` fails. `render(cells, stash)` is the page's Markdown: markdown cells as they
are, code cells as Python blocks, printed text as text blocks, and HTML and figures as
placeholder paragraphs whose HTML goes into `stash` (`hooks.on_page_content` puts it back
after Markdown, which must not touch it). `WSE_DOCS_EXECUTE=0` skips execution (the pages
show the code only; for editing prose with `mkdocs serve`).

Experiments. `experiments_markdown()` is one section per entry of the CLI's registry
(`wse_cli.commands.experiments.EXPERIMENTS`): its description, its module's documentation
(what it predicts and measures, its inputs), how to run it, and, where the experiment has a
predictions-only entry (`<function>_predictions`), its prediction rows computed now, with
each row's role ("fits K", check or prediction) and the published figure beside it; each
experiment's rows are computed in a child process, 2 at a time, and one that takes over
`WSE_DOCS_EXPERIMENT_TIMEOUT_S` (default 120 s) says so instead (`WSE_DOCS_EXPERIMENT_ROWS=0`
leaves all rows out: a quicker build for editing prose). An experiment whose predictions fail
fails the build.
"""

from __future__ import annotations

import html
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DOCS = Path(__file__).resolve().parent
TUTORIALS = DOCS / "tutorials"
RUNNER = DOCS / "execute_tutorial.py"
TAIL_CHARS = 6000  # of a failing tutorial's stderr, in the build's error


class TutorialError(RuntimeError):
    """A tutorial raised: the build fails with its traceback."""


def _execute(name: str) -> tuple[list[dict], float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cells.json"
        env = {**os.environ, "MPLBACKEND": "Agg", "JAX_PLATFORMS": "cpu"}
        env.setdefault("WSE_TUTORIAL_SIZE", "small")
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(RUNNER), str(TUTORIALS / name), str(out)],
            cwd=tmp, env=env, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise TutorialError(f"tutorial {name} failed:\n{done.stderr[-TAIL_CHARS:]}")
        return json.loads(out.read_text()), time.perf_counter() - t0


def execute_all(names: list[str], log) -> dict[str, list[dict]]:
    """name -> executed cells; raises TutorialError on the first failure."""
    if os.environ.get("WSE_DOCS_EXECUTE", "1") == "0":
        log.info("WSE_DOCS_EXECUTE=0: tutorials not executed")
        return {}
    jobs = max(1, int(os.environ.get("WSE_DOCS_JOBS", "2")))
    with ThreadPoolExecutor(jobs) as pool:
        results = dict(zip(names, pool.map(_execute, names), strict=True))
    for name, (_, seconds) in results.items():
        log.info(f"tutorial {name} executed in {seconds:.1f} s")
    return {name: cells for name, (cells, _) in results.items()}


def _fence(kind: str, text: str) -> list[str]:
    ticks = "````" if "```" in text else "```"
    return [f"{ticks}{kind}", text.rstrip("\n"), ticks, ""]


def _stashed(stash: list[str], raw: str) -> list[str]:
    stash.append(raw)
    return [f"WSESTASH{len(stash) - 1}X", ""]


def render(cells: list[dict], stash: list[str]) -> str:
    out: list[str] = []
    for c in cells:
        if c["kind"] == "markdown":  # the page has its own title: a cell's "# " becomes "## "
            out += [re.sub(r"^# ", "## ", c["source"], flags=re.M), ""]
            continue
        out += _fence("python", c["source"])
        if c.get("stdout"):
            out += _fence("text", c["stdout"])
        for png in c.get("images", []):
            img = f'<img alt="figure" src="data:image/png;base64,{png}" style="max-width:100%">'
            out += _stashed(stash, f'<div class="wse-output">{img}</div>')
        if c.get("html"):
            out += _stashed(stash, f'<div class="wse-output">{c["html"]}</div>')
    return "\n".join(out)


def cells_of(name: str) -> list[dict]:
    """The script's cells without outputs (WSE_DOCS_EXECUTE=0)."""
    sys.path.insert(0, str(DOCS))
    try:
        from execute_tutorial import cells
    finally:
        sys.path.remove(str(DOCS))
    return cells((TUTORIALS / name).read_text())


def _doc(obj) -> str:
    return inspect.cleandoc(obj.__doc__ or "").strip()


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v)).replace("|", "\\|") if v is not None else ""


ROWS_SCRIPT = """
import importlib, json, sys, time
from wse_cli.commands.experiments import load
from wse_core.studies.experiment import row_role
fn = load(sys.argv[1])
predict = getattr(importlib.import_module(fn.__module__), fn.__name__ + "_predictions", None)
t0 = time.perf_counter()
rows = [] if predict is None else predict(seed=0)
keys = ("name", "value", "unit", "published", "source")
out = [dict({k: getattr(p, k) for k in keys}, role=row_role(p)) for p in rows]
print(json.dumps({"has": predict is not None, "rows": out, "s": time.perf_counter() - t0}))
"""


def _rows(name: str, timeout_s: float) -> dict | None:
    """The experiment's prediction rows, computed in a child process; None past timeout_s."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", ROWS_SCRIPT, name], capture_output=True, text=True,
            timeout=timeout_s, env={**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"},
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        tail = done.stderr[-TAIL_CHARS:]
        raise TutorialError(f"experiment {name}: its predictions failed:\n{tail}")
    return json.loads(done.stdout.splitlines()[-1])


def _predictions_table(name: str, got: dict | None, timeout_s: float) -> list[str]:
    run = f"`wse experiments run {name}` prints them"
    if got is None:
        return [f"Its prediction rows took over {timeout_s:g} s in this build: {run}.", ""]
    if not got["has"]:
        return [f"Its predictions come with its measured part (not run at build time): {run}.", ""]
    out = [
        f"Its {len(got['rows'])} prediction rows, computed when this page was built "
        f"({got['s']:.1f} s):",
        "",
        "| row | predicted | unit | published | role | source |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in got["rows"]:
        cells = (r["name"], r["value"], r["unit"], r["published"], r["role"], r["source"])
        out.append("| " + " | ".join(_cell(v) for v in cells) + " |")
    return [*out, ""]


def experiments_markdown() -> str:
    from wse_cli.commands.experiments import EXPERIMENTS, load

    timeout_s = float(os.environ.get("WSE_DOCS_EXPERIMENT_TIMEOUT_S", "120"))
    names = list(EXPERIMENTS)
    if os.environ.get("WSE_DOCS_EXPERIMENT_ROWS", "1") == "0":
        computed = {}
    else:
        jobs = max(1, int(os.environ.get("WSE_DOCS_JOBS", "2")))
        with ThreadPoolExecutor(jobs) as pool:
            computed = dict(zip(names, pool.map(lambda n: _rows(n, timeout_s), names), strict=True))
    out: list[str] = []
    for name, (target, desc) in EXPERIMENTS.items():
        fn = load(name)
        module = importlib.import_module(fn.__module__)
        out += [f"## `{name}`", "", f"**{desc}.** `{target}`", ""]
        for text in (_doc(module), _doc(fn)):
            if text:
                out += _fence("text", text)
        out += _fence("bash", f"wse experiments run {name} --quick   # or without --quick")
        if name in computed:
            out += _predictions_table(name, computed[name], timeout_s)
        else:
            out += ["(Prediction rows not computed in this build: WSE_DOCS_EXPERIMENT_ROWS=0.)", ""]
    return "\n".join(out)
