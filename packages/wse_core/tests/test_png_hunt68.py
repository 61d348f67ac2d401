"""The stack's pictures against hunt 68 (`wse_core.figures`, the trace PNG, `atomic_path`).
Broken before:
- a `$` in a name a user gave was read as matplotlib mathtext: `cs2 $\\frac$` was a
  ParseSyntaxException traceback after the work, and `$5 and $6` showed as an italic
  "5and6" (hole 2);
- a file named `.png` (a dotfile, with no suffix to pathlib) got the temporary name
  `..png.xxxx.part`, and matplotlib read the format "part" from it: a ValueError traceback;
  `np.savez` wrote `..npz.xxxx.part.npz` beside an empty `.npz` (hole 3);
- an emoji or a `\\r` in a name printed matplotlib's "Glyph ... missing from font(s)"
  `UserWarning` lines on a successful run (hole 7).
"""

from __future__ import annotations

import dataclasses
import os
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from wse_core.figures import glyph_warnings_silenced, plain, save_png  # noqa: E402
from wse_core.host.atomic import atomic_path  # noqa: E402
from wse_core.testing import tiny_trace  # noqa: E402
from wse_core.trace.png import figure_png, trace_figure  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
NAMES = ["cs2 $\\frac$", "$5 and $6", "a \\$ b", "$", "$$"]


def shown(text: Text) -> str:
    """What matplotlib draws for `text`: its string after mathtext's preprocessing, which
    must not be mathtext."""
    s, math = text._preprocess_math(text.get_text())
    assert math is False, f"{text.get_text()!r} is drawn as mathtext"
    return s


def _pixels(title: str, **kw) -> np.ndarray:
    fig = plt.figure(figsize=(3, 1), dpi=50)
    fig.suptitle(title, **kw)
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba()).copy()
    plt.close(fig)
    return pixels


@pytest.mark.parametrize("name", NAMES)
def test_plain_draws_the_name_as_typed_pixel_for_pixel(name):
    # the oracle: matplotlib's own parse_math=False, which draws the string as it is
    assert np.array_equal(_pixels(plain(name)), _pixels(name, parse_math=False))
    assert shown(Text(text=plain(name))) == name


@pytest.mark.parametrize("name", ["cs2 $\\frac$", "$5 and $6"])
def test_the_trace_png_shows_its_names_as_typed(name, tmp_path):
    trace = tiny_trace()[0]
    regions = [{"name": name, "rect": [0, 0, 2, 2]}]
    named = dataclasses.replace(trace, name=name, wafer=name, regions=regions)
    fig = trace_figure(named)
    fig.canvas.draw()  # raised ValueError (\frac) before
    title = shown(fig._suptitle)
    assert title.startswith(f"{name} on {name} (") and title.endswith("-bound")
    assert [shown(t) for t in fig.axes[3].texts] == [name]
    plt.close(fig)
    assert figure_png(named, tmp_path / "v.png").read_bytes()[:8] == PNG


def test_a_heading_given_by_the_code_is_kept_as_given():
    fig = trace_figure(tiny_trace()[0], title="$x^2$ of a run")
    assert fig._suptitle.get_text() == "$x^2$ of a run"  # the caller's mathtext, on purpose
    plt.close(fig)


def test_a_png_named_dot_png_is_a_png_of_that_name(tmp_path):
    fig = plt.figure(figsize=(2, 2))
    out = save_png(fig, tmp_path / ".png", dpi=50)  # "Format 'part' is not supported" before
    assert out == tmp_path / ".png" and out.read_bytes()[:8] == PNG
    assert os.listdir(tmp_path) == [".png"]
    assert not plt.fignum_exists(fig.number)  # closed
    figure_png(tiny_trace()[0], tmp_path / "d" / ".png")
    assert (tmp_path / "d" / ".png").read_bytes()[:8] == PNG
    assert os.listdir(tmp_path / "d") == [".png"]


def test_a_dotfile_keeps_its_extension_for_every_writer(tmp_path):
    with atomic_path(tmp_path / ".npz") as tmp:
        assert tmp.name.endswith(".npz")
        np.savez(tmp, a=np.arange(3))  # np.savez added .npz to `..npz.xxxx.part` before
    with np.load(tmp_path / ".npz") as z:
        assert z["a"].tolist() == [0, 1, 2]
    assert os.listdir(tmp_path) == [".npz"]
    with atomic_path(tmp_path / "x.png") as tmp:  # a plain name: as before
        assert tmp.suffix == ".png" and tmp.name.startswith(".x.png.")


def test_a_png_that_fails_leaves_nothing(tmp_path):
    fig = plt.figure()
    fig.suptitle("$\\frac$")  # the code's own bad mathtext: still an error, and no file
    with pytest.raises(ValueError):
        save_png(fig, tmp_path / "f.png", dpi=50)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["cs2 \U0001f680", "run\r1", "tab\there \u202e"])
def test_missing_glyphs_raise_no_warning(name, tmp_path):
    named = dataclasses.replace(tiny_trace()[0], name=name)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        figure_png(named, tmp_path / "v.png")
    assert [str(w.message) for w in seen] == []
    assert (tmp_path / "v.png").read_bytes()[:8] == PNG


def test_missing_glyphs_did_warn_and_other_warnings_still_do():
    # the oracle of the test above: unsilenced, matplotlib warns for the rocket
    fig = plt.figure(figsize=(2, 1))
    fig.suptitle("cs2 \U0001f680")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fig.canvas.draw()
        with glyph_warnings_silenced():
            fig.canvas.draw()
            warnings.warn("another warning", UserWarning, stacklevel=1)
    messages = [str(w.message) for w in seen]
    assert any(m.startswith("Glyph 128640") for m in messages[:-1]), messages
    assert messages[-1] == "another warning"
    assert sum(m.startswith("Glyph") for m in messages) == len(messages) - 1
    plt.close(fig)


def test_a_reports_notebook_figure_shows_its_names_as_typed():
    from wse_core import Op, Phase, RunReport, Work, preset, serial
    from wse_core.notebook import report_figure

    work = serial(Phase("a", Work(ops=(Op("add", "fp32", 64),))))
    report = RunReport.build("$5 and $6", preset("tiny"), work, units="$\\frac$")
    fig = report_figure(report)
    fig.canvas.draw()  # raised ValueError (\frac) before
    ax = fig.axes[0]
    assert shown(ax.title) == f"$5 and $6 on tiny: {report.bound}-bound"
    assert shown(ax.xaxis.label) == "predicted cycles per $\\frac$"
    plt.close(fig)
