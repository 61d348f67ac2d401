"""The site build's tutorial runner (`docs/execute_tutorial.py`, used by `docs/hooks.py`) on
small scripts written here: it splits `# %%` cells, captures what each printed, the HTML of a
last expression with `_repr_html_` and the figures left open, and a cell that raises makes it
exit 1 naming the cell (so a failing tutorial fails `mkdocs build`)."""

import base64
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "docs" / "execute_tutorial.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

GOOD = """# %% [markdown]
# # A title
# Some prose.

# %%
import matplotlib.pyplot as plt
x = 6 * 7
print("answer", x)

# %%
class Shown:
    def _repr_html_(self):
        return "<b>shown</b>"

fig, ax = plt.subplots()
ax.plot([0, 1], [x, x])
Shown()
"""


def _run(tmp_path, text):
    script, out = tmp_path / "t.py", tmp_path / "cells.json"
    script.write_text(text)
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(script), str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    return done, out


def test_runner_captures_text_html_and_figures(tmp_path):
    done, out = _run(tmp_path, GOOD)
    assert done.returncode == 0, done.stderr
    cells = json.loads(out.read_text())
    assert [c["kind"] for c in cells] == ["markdown", "code", "code"]
    assert cells[0]["source"] == "# A title\nSome prose."
    assert cells[1]["stdout"] == "answer 42\n" and cells[1]["html"] is None
    assert cells[2]["html"] == "<b>shown</b>"
    (png,) = cells[2]["images"]
    assert base64.b64decode(png).startswith(PNG_MAGIC)
    assert cells[1]["images"] == []  # figures are closed after the cell that drew them


def test_a_failing_cell_fails_the_run(tmp_path):
    done, out = _run(tmp_path, GOOD + "\n# %%\nassert x == 41, 'wrong answer'\n")
    assert done.returncode == 1
    assert "AssertionError: wrong answer" in done.stderr
    assert 't.py: cell 3 ("assert x == 41' in done.stderr
    assert not out.exists()
