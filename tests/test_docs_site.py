"""The documentation site: `mkdocs build --strict` passes, which executes every tutorial
(`docs/hooks.py`: a failing one fails the build; `tests/test_docs_tutorials.py` checks the
runner), every tutorial page shows its executed output, the CLI reference has a section for
every command, the experiments page a section for every experiment, and the built index and a
tutorial render in headless Chromium without a script error.

Needs the `docs` extra (skipped without mkdocs) and, for the browser check, Debian's
`chromium` (skipped without it, except under CI=true, where `.ci/run` installs it).
"""

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.py"))
BUILD_TIMEOUT_S = 2400  # 9 tutorials, 2 at a time: ~15 min at load ~19 on the 2 cores
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]


def _env() -> dict[str, str]:
    return {**os.environ, "MPLBACKEND": "Agg", "JAX_PLATFORMS": "cpu"}


def _commands() -> list[str]:
    """`wse GROUP` for every group and command `wse --help` lists (read from its text)."""
    done = subprocess.run(
        [sys.executable, "-m", "wse_cli", "--help"], capture_output=True, text=True, check=True
    )
    listed = done.stdout.split("Commands:", 1)[1]
    return [f"wse {m}" for m in re.findall(r"^  (\w[\w-]*)\s", listed, re.M)]


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S + 300)  # over pytest-timeout's default (pyproject)
def test_the_site_builds_strictly_and_renders(tmp_path):
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=ROOT, env={**_env(), "NO_MKDOCS_2_WARNING": "1", "WSE_TUTORIAL_SIZE": "small"},
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    cli = (site / "cli.html").read_text()
    commands = _commands()
    assert len(commands) >= 9
    for cmd in commands:  # every command of `wse --help` has its section
        assert f"<code>{cmd}</code>" in cli, cmd
    pages = sorted((site / "tutorials").glob("*.html"))
    assert len(pages) == len(TUTORIALS)
    for p in pages:  # every tutorial was executed: a figure or a `_repr_html_` on its page
        assert 'class="wse-output"' in p.read_text(), p.name
    tutorial = site / "tutorials" / "heat-on-the-wafer.html"
    page = tutorial.read_text()
    assert "run_stencil" in page  # the script's code
    assert "max deviation from the exact discrete decay" in page  # what it printed
    assert 'src="data:image/png;base64,' in page and "<iframe" in page  # figure, wse view
    # the page's text as a reader sees it: code blocks are highlighted into <span>s
    experiments = html.unescape(re.sub(r"<[^>]+>", "", (site / "experiments.html").read_text()))
    from wse_cli.commands.experiments import EXPERIMENTS

    for name in EXPERIMENTS:
        assert f"wse experiments run {name}" in experiments, name
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no chromium in CI: .ci/run installs it (apt-get install chromium)")
        pytest.skip("no chromium (apt-get install chromium)")
    for page, heading in ((site / "index.html", "wse-stack"), (tutorial, "heat on the wafer")):
        run = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
             page.as_uri()],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert heading.lower() in run.stdout.lower(), run.stdout[-1000:]
        # Chromium logs every console message (console.error too, its level not shown) and
        # every uncaught exception as a CONSOLE line: the site's pages write none
        errors = [ln for ln in run.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
        assert not errors, errors
