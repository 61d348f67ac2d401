"""mkdocs hooks of the documentation site: the CLI reference written from the typer app.

`cli.md` holds the marker `<!-- wse-cli-reference -->`; `on_page_markdown` replaces it with one
section per command of `wse` (every group and subcommand, depth first), each the help text
click prints for it (`wse ... --help`), so the page can never drift from the commands.
"""

from __future__ import annotations

from typing import Any

MARKER = "<!-- wse-cli-reference -->"


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


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
