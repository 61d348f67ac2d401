"""Hunt 78's CLI edges.

Float options echoed a value that overflows a float as Python's "inf" (`--temperature
1e309` -> "got inf"); now a value that parses to inf or NaN is shown as typed. Oracle: the
text given, and Python's float() saying it is not finite (so `number` must refuse it).

`wse wafer defects --load` never showed the map file's `wafer` member, which defect_files
documents as "shown, never checked"; now it is shown ("written for wafer 'NAME'", and
`--json`'s `map_wafer`). Oracle: the name as np.savez wrote it (a round trip), and a map
written for another wafer still repaired (never checked).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.errors import WseGroup
from wse_cli.options import number
from wse_cli.testing import invoke, refused_in_one_line
from wse_core.errors import SHOWN_CHARS

pytestmark = pytest.mark.timeout(60)
ROOT = typer.main.get_command(app)
TYPED = ["1e309", "-1e309", "1E400", "inf", "-Infinity", "nan", "-nan", "9" * 400]


def _group(seen: list):
    group = typer.Typer(cls=WseGroup)

    @group.command("one")
    def one(x: float = number(None, "--x", ge=0, le=2)) -> None:
        seen.append(x)

    group.command("other")(lambda: None)  # two commands: "one" stays a subcommand
    return typer.main.get_command(group)


@pytest.mark.parametrize("text", TYPED)
def test_a_non_finite_float_is_refused_as_typed(text):
    assert not math.isfinite(float(text))  # Python's reading: never a finite number
    seen: list = []
    code, out = invoke(_group(seen), ["one", "--x", text])
    head = SHOWN_CHARS  # a long input's echo: its head and its length (wse_core.errors.shown)
    shown = text if len(text) <= head else f"{text[:head]}... ({len(text):,} characters)"
    assert (code, out.strip(), seen) == (
        2, f"Error: --x must be a finite number in [0, 2], got {shown}", [],
    )  # fmt: skip


def test_a_finite_float_is_still_read():
    seen: list = []
    assert invoke(_group(seen), ["one", "--x", "1.5e0"])[0] == 0 and seen == [1.5]


@pytest.mark.parametrize(
    ("args", "option"),
    [(["wafer", "defects", "-p", "tiny"], "--defect-rate"),
     (["infer", "generate", "--model_dir", "mock", "--prompt", "hi"], "--temperature")],
)  # fmt: skip
def test_the_issues_options_show_1e309(args, option):
    line = refused_in_one_line(ROOT, [*args, option, "1e309"], f"{option} must be")
    assert line.endswith("got 1e309") and "inf" not in line


def test_a_loaded_map_shows_the_wafer_it_was_written_for(tmp_path):
    saved = tmp_path / "m.npz"
    assert invoke(ROOT, ["wafer", "defects", "-p", "tiny", "--save", saved])[0] == 0
    with np.load(saved) as z:  # the name as written (a round trip)
        dead, name = z["dead"], str(z["wafer"])
    code, out = invoke(ROOT, ["wafer", "defects", "-p", "tiny", "--load", saved])
    assert code == 0 and f"written for wafer {name!r}" in out and len(out.splitlines()) == 1
    code, out = invoke(ROOT, ["wafer", "defects", "-p", "tiny", "--load", saved, "--json"])
    assert code == 0 and json.loads(out)["map_wafer"] == name == "tiny"
    other = tmp_path / "other.npz"  # another wafer's name: shown, never checked
    np.savez(other, dead=dead, wafer="wse2\nline two")
    code, out = invoke(ROOT, ["wafer", "defects", "-p", "tiny", "--load", other])
    assert code == 0 and "written for wafer 'wse2\\nline two'" in out
    assert len(out.strip().splitlines()) == 1
    bare = tmp_path / "bare.npz"  # no wafer member: nothing said
    np.savez(bare, dead=dead)
    code, out = invoke(ROOT, ["wafer", "defects", "-p", "tiny", "--load", bare, "--json"])
    assert code == 0 and json.loads(out)["map_wafer"] is None
