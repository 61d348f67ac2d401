"""Hunt 66: what the documentation says is what the stack does.

Broken before (each checked here against the code, the CLI or a run):
- commands the pages give that do not parse: `wse train --config tiny` (the weight-streaming
  tutorial; the config is positional) and `wse plan infer --systems` (limits.md; the option
  is `--wafers`);
- plan.md gave serving's GPU MFU and HBM fraction as 0.4 and 0.8; `wse plan infer` uses the
  fractions fitted on TensorRT-LLM's H100 rows (0.269, 0.713); 0.4 is training's;
- the TLR-MVM tutorial called its product memory-bound above a cell printing "compute-bound";
- five pages cited `shared/REFERENCES.md`, a file outside the repository;
- getting-started.md pointed at "the lane below" at its last line (now the GPU page);
- fields.md's snippet used an undefined `values`, never said how to read a field back
  (`Field.numpy()`) nor that `laplacian` divides by the spacing squared;
- tour.md and experiments.md listed four files an experiment writes (it writes
  `mechanisms.png`, and `--sweep` `sweep_<key>.md` / `.csv`); tour.md ran `--spec
  my_wafer.yaml` without giving the file; no page but the CLI reference named `wse infer
  bench`;
- bicgstab-reach.md read as a default tol of 1e-4 (it is 1e-3) and promised a looser `--tol`
  where the warning gives a smaller grid;
- the tutorials said `jupytext --to ipynb` while no extra installed jupytext or a kernel.
"""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from pathlib import Path

import typer
from wse_cli.app import app
from wse_cli.testing import invoke

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CLI = typer.main.get_command(app)
PAGES = sorted(p for p in [*DOCS.glob("*.md"), *DOCS.glob("*/*.md")] if p.name != "cli.md")
TUTORIAL_SCRIPTS = sorted((DOCS / "tutorials").glob("*.py"))


def _option_names(cmd) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}


def _every_option_name() -> set[str]:
    names: set[str] = set()
    stack = [CLI]
    while stack:
        cmd = stack.pop()
        names |= _option_names(cmd)
        stack += list(getattr(cmd, "commands", {}).values())
    return names


def _commands_in(text: str) -> list[str]:
    """Every `wse ...` a page gives: inline code, and the lines of its shell blocks."""
    spans = re.findall(r"`(wse [^`]+)`", text)
    for block in re.findall(r"```(?:bash|console|sh)?\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        spans += [ln.split(" #")[0] for ln in joined.splitlines() if ln.strip().startswith("wse ")]
    return spans


def _unknown_options(span: str) -> list[str]:
    """The options of `span` (`wse GROUP CMD --opt ...`) its command does not have; after a
    bare `--` (`wse launch ... -- CMD`) the words are a command of their own."""
    cmd, path, out = CLI, ["wse"], []
    for word in span.split()[1:]:
        word = word.strip("[]|(),;")
        if word == "--":
            cmd, path = CLI, ["wse"]
        elif word.startswith("--"):
            if (name := word.split("=")[0]) not in _option_names(cmd):
                out.append(f"`{' '.join(path)}` has no {name}")
        elif word in getattr(cmd, "commands", {}):
            cmd = cmd.commands[word]
            path.append(word)
    return out


def test_every_command_the_pages_give_has_the_options_they_give_it():
    problems = [
        f"{page.relative_to(DOCS)}: {span}: {why}"
        for page in [*PAGES, *TUTORIAL_SCRIPTS]
        for span in _commands_in(page.read_text())
        for why in _unknown_options(span)
    ]
    assert problems == []
    assert _unknown_options("wse train --config tiny")  # the check's own oracle (hunt 66)
    assert _unknown_options("wse plan infer --systems 2")


def test_every_option_limits_md_names_exists():
    page = (DOCS / "limits.md").read_text()
    names = {m.split("=")[0] for m in re.findall(r"`(--[a-z][\w-]*)", page)}
    assert {"--spec", "--chat-template", "--assume"} <= names and "plan infer --wafers" in page
    assert sorted(names - _every_option_name()) == []


def test_plan_md_gives_the_gpu_fractions_each_side_uses():
    from wse_core.cost.assumptions import system_constant
    from wse_systems.serving.gpu_step import FITTED_HBM_FRACTION, FITTED_MFU

    page = (DOCS / "plan.md").read_text()
    # hunt 71: --mfu defaults to the registered assumption gpu.train_mfu (None: read it)
    train_mfu = next(p for p in CLI.commands["plan"].commands["train"].params if p.name == "mfu")
    assert train_mfu.default is None

    def numbers(words: str) -> list[float]:
        row = next(line for line in page.splitlines() if words in line)
        return [float(x) for x in row.split(" | ")[1].split(", ")]

    assert numbers("serving (`wse plan infer --mfu`") == [FITTED_MFU, FITTED_HBM_FRACTION]
    assert numbers("training (`wse plan train --mfu`") == [system_constant("gpu.train_mfu")]
    assert "0.4, 0.8" not in page


def test_the_tlr_tutorial_says_the_bound_its_cell_prints():
    from wse_core import preset
    from wse_hpc.tlrmvm.compress import compress
    from wse_hpc.tlrmvm.engine import TlrEngine
    from wse_hpc.tlrmvm.seismic import green_operator

    op = compress(green_operator(n=512), nb=64, threshold=1e-3)  # the page's small size
    report = TlrEngine.build(op, preset("wse2")).report(measured_wall_s=1.0)
    text = (DOCS / "tutorials" / "tlr_mvm.py").read_text()
    assert f"prices the product {report.bound}-bound" in text
    assert "memory-bound" not in text
    phase1 = report.predicted.leaf("phase1_vhx").cost.mechanisms  # the prose's "why"
    assert report.to_dict()["critical_phase"] == "phase1_vhx"
    assert 1.5 < phase1["simd"] / phase1["sram"] < 2.5 and phase1["dsd_issue"] > 0


def test_no_page_cites_a_file_outside_the_repository():
    cited = [p.relative_to(DOCS) for p in PAGES if "REFERENCES.md" in p.read_text()]
    assert cited == []
    page = (DOCS / "references" / "calibration-rows.md").read_text()
    table = page.split("## The calibration set", 1)[1].split("\n\n", 2)[1]
    for row in table.splitlines()[2:]:  # every repository a source names, with its commit
        for repo in re.findall(r"\b([A-Za-z][\w-]+/[\w.-]+) at\b", row):
            assert re.search(rf"{re.escape(repo)} at [0-9a-f]{{40}}", row), repo
    for ref in ("arXiv:2204.03775", "arXiv:2404.15888", "arXiv:2010.03660", "Hot Chips 2024",
                "NVIDIA/TensorRT-LLM v0.19.0", "85a2a656c25e374a0d4cb9a7d0f15a3e82855937",
                "MeshInfra/WaferLLM at 2cd13b5c16ab0c280a2cc1f80f105d704c333915"):  # fmt: skip
        assert ref in table, ref


def test_getting_started_links_the_gpu_page():
    page = (DOCS / "getting-started.md").read_text()
    assert "](gpu.md)" in page and "lane below" not in page


def test_the_fields_snippet_runs_and_equals_numpy():
    code = re.search(r"```python\n(.*?)```", (DOCS / "fields.md").read_text(), re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})  # noqa: S102 (the page's own snippet)
    assert float(out.getvalue()) < 1e-6  # fp32 rounding of a Laplacian scaled by 1/h^2


def test_the_pages_name_every_file_an_experiment_writes(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from wse_core.studies.experiment import ExperimentResult, PredictionRow, write_experiment
    from wse_core.studies.sweeps import Sweep

    row = PredictionRow("t", 1.0, "s", {}, mechanisms={"simd": 2.0, "link": 1.0})
    folder = write_experiment(ExperimentResult("x", 0, {}, [], [row], figure=Figure()), tmp_path)
    Sweep("hop_latency_cycles", (1.0, 2.0), (("t", "s", (1.0, 1.1)),)).write(folder)
    names = sorted(p.name.replace("hop_latency_cycles", "<key>") for p in folder.iterdir())
    assert len(names) == 7, names
    for page in ("tour.md", "experiments.md"):
        text = (DOCS / page).read_text()
        text = text.replace("sweep_<key>.md` / `.csv", "sweep_<key>.md sweep_<key>.csv")
        said = [n for n in names if n in text]
        assert said == names, (page, sorted(set(names) - set(said)))


def test_tours_spec_file_is_given_and_read(tmp_path):
    page = (DOCS / "tour.md").read_text()
    assert "wse wafer info --spec my_wafer.yaml" in page
    spec = re.search(r"```yaml\n(.*?)```", page, re.S).group(1)
    (tmp_path / "my_wafer.yaml").write_text(spec)
    code, out = invoke(CLI, ["wafer", "info", "--spec", tmp_path / "my_wafer.yaml", "--json"])
    assert code == 0, out
    assert '"clock_hz": 1200000000.0' in out and "wse infer bench" in page


def test_bicgstab_reach_states_the_defaults_and_the_warnings_advice(monkeypatch):
    from wse_core import preset
    from wse_hpc.stencil import reach
    from wse_hpc.stencil.config import StencilConfig
    from wse_hpc.stencil.runs import bicgstab_request

    def request(dtype):
        return bicgstab_request(
            StencilConfig(kind="bicgstab", grid=(8, 8, 8), spec=preset("wse2"), dtype=dtype)
        )

    (_, mixed, cap), (_, fp32, _) = request("mixed"), request("fp32")
    page = " ".join((DOCS / "bicgstab-reach.md").read_text().split())
    e = lambda x: f"{x:.0e}".replace("e-0", "e-")  # noqa: E731 (1e-3, as the page writes it)
    assert f"stops at {e(mixed)} (mixed) or {e(fp32)} (fp32), without `--steps` at {cap:,}" in page
    # each advice the page promises, from the warning itself on the 2026-11-27 sweep's table,
    # where every branch is taken (mixed short of fp32 at 1e-4, fp32 short of 128^3 at 3e-7)
    sweep = {"mixed": dict.fromkeys((1e-4, 1e-5, 1e-6, 3e-7), 96), "fp32": {3e-7: 96}}
    sweep["mixed"][1e-3] = 128
    sweep["fp32"] |= dict.fromkeys((1e-3, 1e-4, 1e-5, 1e-6), 128)
    monkeypatch.setattr(reach, "REACH", sweep)
    monkeypatch.setattr(reach, "LARGEST_TRIED", 128)
    said = {  # the page's words -> (a request, what its warning says)
        "`--dtype fp32` where fp32 reached it": (("mixed", 128, 1e-4), "use --dtype fp32"),
        "a looser `--tol` where one was reached on that grid":
            (("fp32", 128, 3e-7), "a looser --tol"),
        "a smaller grid where none was": (("fp32", 256, 3e-7), "a smaller grid"),
        "in either case a higher `--steps`": (("fp32", 256, 3e-7), "or a higher --steps"),
    }  # fmt: skip
    for words, ((precision, n, tol), offered) in said.items():
        assert words in page, words
        assert offered in reach.advice(precision, (n, n, n), tol, cap), words


def test_the_docs_extra_installs_what_the_tutorials_tell_to_run():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    docs = {
        re.split(r"[<>=\[ ]", r, maxsplit=1)[0] for r in extras["optional-dependencies"]["docs"]
    }
    assert {"jupytext", "nbconvert", "ipykernel"} <= docs
    for page in sorted((DOCS / "tutorials").glob("*.md")):
        text = page.read_text()
        if "jupytext --to ipynb" in text:
            assert 'pip install -e ".[docs]"' in text, page.name
