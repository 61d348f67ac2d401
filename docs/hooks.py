"""mkdocs hooks of the documentation site: pages written from the code when the site builds.

- `cli.md` holds the marker `<!-- wse-cli-reference -->`; `on_page_markdown` replaces it with
  one section per command of `wse` (every group and subcommand, depth first), each the help
  text click prints for it (`wse ... --help`), so the page can never drift from the commands.
- Every `docs/tutorials/*.py` is executed before the build (`on_pre_build`,
  `tutorial_pages.execute_all`): a tutorial that raises fails `mkdocs build`. A page with
  `<!-- wse-tutorial: NAME.py -->` shows that script's cells with what each printed, its
  figures and the HTML its last expression shows in a notebook (`_repr_html_`).
- `experiments.md` holds `<!-- wse-experiments -->`: one section per registered experiment,
  its prediction rows computed at build time (`tutorial_pages.experiments_markdown`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tutorial_pages beside this file
import tutorial_pages  # noqa: E402

MARKER = "<!-- wse-cli-reference -->"
TUTORIAL = re.compile(r"<!-- wse-tutorial: ([\w.]+) -->")
EXPERIMENTS = "<!-- wse-experiments -->"
STASHED = re.compile(r"<p>WSESTASH(\d+)X</p>")
_executed: dict[str, list[dict]] = {}
_stash: list[str] = []


def _sections(cmd: Any, ctx: Any, path: list[str]) -> list[str]:
    out = [f"## `{' '.join(path)}`", "", "```text", cmd.get_help(ctx).rstrip(), "```", ""]
    for name in cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []:
        sub = cmd.get_command(ctx, name)  # a group's commands (typer ships its own click)
        if sub is None or sub.hidden:
            continue
        out += _sections(sub, type(ctx)(sub, info_name=name, parent=ctx), [*path, name])
    return out


def cli_reference() -> str:
    """Every command's help as Markdown sections."""
    import typer
    from wse_cli.app import app

    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="wse", terminal_width=100, max_content_width=100)
    return "\n".join(_sections(root, ctx, ["wse"]))


def on_pre_build(config: Any, **kwargs: Any) -> None:
    from mkdocs.exceptions import PluginError
    from mkdocs.plugins import get_plugin_logger

    names = sorted(p.name for p in tutorial_pages.TUTORIALS.glob("*.py"))
    _stash.clear()
    try:
        _executed.clear()
        _executed.update(tutorial_pages.execute_all(names, get_plugin_logger("tutorials")))
    except tutorial_pages.TutorialError as e:
        raise PluginError(str(e)) from None


def _tutorial(match: re.Match) -> str:
    name = match.group(1)
    cells = _executed.get(name) or tutorial_pages.cells_of(name)
    return tutorial_pages.render(cells, _stash)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    if EXPERIMENTS in markdown:
        from mkdocs.exceptions import PluginError

        try:
            markdown = markdown.replace(EXPERIMENTS, tutorial_pages.experiments_markdown())
        except tutorial_pages.TutorialError as e:
            raise PluginError(str(e)) from None
    return TUTORIAL.sub(_tutorial, markdown)


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    """Put the stashed outputs (figures, `_repr_html_`) back, untouched by Markdown."""
    return STASHED.sub(lambda m: _stash[int(m.group(1))], html)
