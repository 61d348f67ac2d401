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
each row's role (fitted, check or prediction) and the published figure beside it
(`WSE_DOCS_EXPERIMENT_ROWS=0` leaves the rows out: a quicker build for editing prose).
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


def _predictions_table(fn) -> list[str]:
    module = importlib.import_module(fn.__module__)
    predict = getattr(module, f"{fn.__name__}_predictions", None)
    if os.environ.get("WSE_DOCS_EXPERIMENT_ROWS", "1") == "0":
        return ["(Prediction rows not computed in this build: WSE_DOCS_EXPERIMENT_ROWS=0.)", ""]
    if predict is None:
        return [
            "Its predictions come with its measured part: `wse experiments run` prints "
            "them (not run at build time).",
            "",
        ]
    from wse_core.studies.experiment import row_role

    t0 = time.perf_counter()
    rows = predict(seed=0)
    out = [
        f"Its {len(rows)} prediction rows, computed when this page was built "
        f"({time.perf_counter() - t0:.1f} s):",
        "",
        "| row | predicted | unit | published | role | source |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for p in rows:
        cells = (p.name, p.value, p.unit, p.published, row_role(p), p.source)
        out.append("| " + " | ".join(_cell(v) for v in cells) + " |")
    return [*out, ""]


def experiments_markdown() -> str:
    from wse_cli.commands.experiments import EXPERIMENTS, load

    out: list[str] = []
    for name, (target, desc) in EXPERIMENTS.items():
        fn = load(name)
        module = importlib.import_module(fn.__module__)
        out += [f"## `{name}`", "", f"**{desc}.** `{target}`", ""]
        for text in (_doc(module), _doc(fn)):
            if text:
                out += _fence("text", text)
        out += _fence("bash", f"wse experiments run {name} --quick   # or without --quick")
        out += _predictions_table(fn)
    return "\n".join(out)
