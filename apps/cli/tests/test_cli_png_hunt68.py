"""The commands' `--png` against hunt 68: each writes its picture, with the names as typed,
no Python warnings, and nothing else left behind. Broken before:
- a `$` in a wafer or model name was read as mathtext: `hpc stencil --png`, `view --png`
  and `plan train --png` were tracebacks (exit 1) after the work for `cs2 $\\frac$`, and
  `wse view` had already written its page; `$5 and $6` was drawn as an italic "5and6"
  (hole 2);
- `--png .png` (a dotfile) was "Format 'part' is not supported", a traceback after the work,
  and `wse view` left its page behind (hole 3);
- an emoji or a `\\r` in a name put matplotlib's missing-glyph `UserWarning` lines on stderr
  of a run that succeeded (hole 7);
- `hpc cfd --steps 0 --png` titled its picture "Nu nan, KE 0" where its JSON says null for
  both (hole 8).
The core's side (`wse_core.figures`, `atomic_path`) is tested in
packages/wse_core/tests/test_png_hunt68.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import warnings

import pytest
import typer
from matplotlib.figure import Figure
from matplotlib.text import Text
from wse_cli.app import app
from wse_cli.testing import WSE, clean_env, invoke
from wse_core.testing import tiny_trace

pytestmark = pytest.mark.timeout(180)
ROOT = typer.main.get_command(app)
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def drawn(monkeypatch):
    """Every text of every figure the command saved, as matplotlib drew it: (string,
    whether mathtext); Python warnings raised meanwhile are turned into failures."""
    texts: list[tuple[str, bool]] = []
    save = Figure.savefig

    def spy(fig, *args, **kw):
        save(fig, *args, **kw)
        texts.extend(t._preprocess_math(t.get_text()) for t in fig.findobj(Text) if t.get_text())

    monkeypatch.setattr(Figure, "savefig", spy)
    return texts


def _plain(texts) -> list[str]:
    return [s for s, math in texts if math is False]


def _spec(folder, name: str):
    path = folder / "s.yaml"
    path.write_text(json.dumps({"base": "wse2", "name": name}, ensure_ascii=False))  # YAML
    return path


def test_stencil_png_shows_a_dollar_and_rocket_wafer_as_typed(tmp_path, drawn):
    name = "cs2 $\\frac$ \U0001f680"
    png = tmp_path / "st.png"
    args = ["hpc", "stencil", "--kind", "heat", "--spec", _spec(tmp_path, name),
            "--grid", "8", "8", "4", "--steps", "2", "--png", png]  # fmt: skip
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        code, output = invoke(ROOT, args)  # exit 1, a ParseSyntaxException, before
    assert code == 0, output[-3000:]
    assert png.read_bytes()[:8] == PNG
    assert f"8 x 8 x 4 on {name}, fp32" in _plain(drawn)
    assert [str(w.message) for w in seen if "Glyph" in str(w.message)] == []


def _named_trace(folder, name: str):
    trace = dataclasses.replace(tiny_trace()[0], name=name, wafer="wse2")
    return trace.save(folder / "t.npz")


def test_view_png_shows_balanced_dollars_as_typed_and_writes_a_dot_png(tmp_path, drawn):
    trace = _named_trace(tmp_path, "$5 and $6")
    code, output = invoke(ROOT, ["view", trace, "--out", tmp_path / "z.html", "--png",
                                 tmp_path / ".png"])  # fmt: skip
    assert code == 0, output[-3000:]
    assert (tmp_path / ".png").read_bytes()[:8] == PNG
    assert (tmp_path / "z.html").stat().st_size > 0
    assert sorted(os.listdir(tmp_path)) == [".png", "t.npz", "z.html"]  # no .part file
    assert [s for s in _plain(drawn) if s.startswith("$5 and $6 on wse2 (")], drawn


def test_view_leaves_no_page_when_its_png_fails(tmp_path, monkeypatch):
    from wse_core.errors import WseError

    def fails(trace, path):
        raise WseError(f"cannot draw {path}")

    monkeypatch.setattr("wse_core.trace.png.figure_png", fails)
    trace = _named_trace(tmp_path, "t")
    code, output = invoke(ROOT, ["view", trace, "--png", tmp_path / "v.png"])
    assert code == 2 and output.strip() == f"Error: cannot draw {tmp_path / 'v.png'}", output
    assert os.listdir(tmp_path) == ["t.npz"]  # t.html was written first before


def test_view_png_of_an_emoji_and_cr_name_prints_only_its_lines(tmp_path):
    trace = _named_trace(tmp_path, "run \U0001f680\r1")
    done = subprocess.run([*WSE, "view", str(trace), "--png", str(tmp_path / "v.png")],
                          capture_output=True, text=True, timeout=120, env=clean_env())  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""  # "UserWarning: Glyph 128640 ... missing" and "Glyph 13" before
    assert done.stdout.splitlines()[-1] == f"png: {tmp_path / 'v.png'}"
    assert (tmp_path / "v.png").read_bytes()[:8] == PNG


def test_wafer_defects_png_named_dot_png(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, output = invoke(ROOT, ["wafer", "defects", "-p", "tiny", "--png", ".png"])
    assert code == 0, output[-3000:]  # "Format 'part' is not supported" before
    assert (tmp_path / ".png").read_bytes()[:8] == PNG
    assert os.listdir(tmp_path) == [".png"]


def test_plan_train_png_of_a_dollar_model_folder(tmp_path, monkeypatch, drawn):
    from wse_models.testing import LLAMA3_8B_HF

    monkeypatch.chdir(tmp_path)
    model = "m$\\frac$"
    os.mkdir(model)
    (tmp_path / model / "config.json").write_text(json.dumps(LLAMA3_8B_HF))
    code, output = invoke(ROOT, ["plan", "train", "-m", model, "--tokens", "1e12",
                                 "--png", "p.png"])  # fmt: skip
    assert code == 0, output[-3000:]  # an 80-line traceback (exit 1) before
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG
    assert f"wse plan train: {model}" in _plain(drawn), drawn


def test_cfd_png_of_zero_steps_says_no_value_as_its_json_does(tmp_path, drawn):
    png = tmp_path / "s0.png"
    args = ["hpc", "cfd", "--grid", "16", "8", "1", "--steps", "0", "--png", png, "--json"]
    code, output = invoke(ROOT, args)
    assert code == 0, output[-3000:]
    report = json.loads(output[output.index("\n{") + 1 :] if output[0] != "{" else output)
    assert report["nusselt"] is None and report["kinetic_energy"] is None
    # "Nu nan, KE 0" before; hunt 75 put the time's unit after it
    assert "rayleigh-benard: step 0, t 0 H/U_ff, Nu -, KE -" in _plain(drawn), drawn
    assert png.read_bytes()[:8] == PNG
