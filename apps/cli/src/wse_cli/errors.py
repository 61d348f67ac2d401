"""How the `wse` command turns user errors into exit code 2 and one readable line.

`WseGroup` is the click group class of every typer app in the CLI: a `WseError` (or a
`UserInputError`) raised anywhere below it is printed as `Error: <message>` on stderr and the
command exits with code 2 — no traceback; a `wse_core.errors.RunFault` (a fault while a valid
run works: a full disk, a solver's NaN) is one line too, with exit code 1, and so is an
OSError of the disk (full, read-only, failing) from any write. `typer.Exit(1)`
stays for "ran, answer is no" (e.g. a wafer that cannot be repaired). It is also where the
one option spelling is applied (`wse_cli.option_names.dashed`: `--model_dir` is read as
`--model-dir`) and a single-valued option given twice with different values is refused
(`wse_cli.option_repeats`) before click parses a command's arguments, and where the
multi-process join the root callback deferred is made, once a command's arguments are parsed
(`wse_cli.multiprocess`). A path the file system cannot name (ENAMETOOLONG) is one line and
exit code 2 too. Control characters in an error line (a newline or ESC in a path) are printed
escaped (`printable`), so the line stays one line and cannot drive the terminal. Ctrl-C in
a command is `interrupts.LINE` and exit code 130, unless the command says its own line and
exits 130 itself (`wse_cli.interrupts`).
"""

from __future__ import annotations

import errno
import functools
import os
import sys
import unicodedata
from collections.abc import Callable

import typer
from typer.core import TyperGroup

from wse_cli import interrupts
from wse_cli.option_names import OUTPUT_MARK, dashed
from wse_cli.option_repeats import repeated

__all__ = ["WseGroup", "UserInputError", "fail", "note"]


class UserInputError(ValueError):
    """Bad input found by the CLI itself (a flag combination, a file)."""


def _is_user_error(e: BaseException) -> bool:
    if isinstance(e, UserInputError):
        return True
    wse_core = sys.modules.get("wse_core.errors")
    return wse_core is not None and isinstance(e, wse_core.WseError)


class WseGroup(TyperGroup):
    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        args = dashed(args, self.params)
        if why := repeated(args, self.params, group=True) or empty_path(args, self.params):
            raise UserInputError(why)
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: typer.Context, args: list[str]):  # type: ignore[override]
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, TyperGroup):  # a group spells its own
            rest = dashed(rest, cmd.get_params(ctx))
            if why := repeated(rest, cmd.get_params(ctx)) or empty_path(rest, cmd.get_params(ctx)):
                raise UserInputError(why)
            if "invoke" not in vars(cmd):
                cmd.invoke = functools.partial(_join_then_invoke, cmd)  # type: ignore[method-assign]
        return name, cmd, rest

    def make_context(self, info_name, args, parent=None, **extra):  # type: ignore[override]
        # the root's own options (--devices) are parsed here, before `invoke`
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except Exception as e:
            if _is_user_error(e):
                _say(str(e))
                raise typer.Exit(getattr(e, "exit_code", 2)) from None
            if isinstance(e, OSError) and e.errno in _DISK_FAULTS:  # hunt 65: `--version`'s
                _say(_cannot_write(e))  # eager echo into a full disk was a traceback
                raise typer.Exit(1) from None
            _one_line_usage(e)
            raise

    def invoke(self, ctx: typer.Context):  # type: ignore[override]
        try:
            done = super().invoke(ctx)
        except KeyboardInterrupt:  # hunt 65: Ctrl-C was exit 130 with nothing said
            _NOTES.clear()
            interrupts.say()
            raise typer.Exit(130) from None
        except Exception as e:  # click's own exits and usage errors are not user errors here
            if type(e).__name__ == "Exit" and getattr(e, "exit_code", 0) == 130:
                interrupts.said()  # the command said its own (`wse train`, `wse hpc md`)
            if _is_user_error(e):
                _NOTES.clear()  # the refusal is the one line
                _say(str(e))
                raise typer.Exit(getattr(e, "exit_code", 2)) from None
            if (no_backend := _no_backend(e)) is not None:  # hunt 58: was a traceback
                _NOTES.clear()
                _say(no_backend)
                raise typer.Exit(2) from None
            if isinstance(e, OSError) and e.errno == errno.ENAMETOOLONG:  # hunt 59: a traceback
                _NOTES.clear()
                _say(_name_too_long(e))
                raise typer.Exit(2) from None
            if isinstance(e, OSError) and e.errno in _DISK_FAULTS:  # a valid run's fault: 1
                _NOTES.clear()
                _say(_cannot_write(e))
                raise typer.Exit(1) from None
            if type(e).__name__ == "Exit" and getattr(e, "exit_code", 1) in (0, 1):
                _say_notes()  # ran: "ran, answer is no" (exit 1) wrote its files too
            else:
                _NOTES.clear()
            _one_line_usage(e)
            raise
        _say_notes()
        return done


def empty_path(args: list[str], params: list) -> str | None:
    """Why `args` give a path option an empty value, else None: an input file option (a
    `Path`: --spec, --structure, --potential, --operator, --model-dir, ...) or an output
    option (`wse_cli.outputs`, in its own words). click reads '' as '.', the current folder
    (hunt 61: `--model-dir ''` was "'.' is neither an HF-format directory", `--structure ''`
    "structure file '.' is a folder"; with an older typer, 0.15.4 here and the GPU
    machine's image's, `--out ''` wrote into the current folder: typer turned outputs'
    marker for '' into Path('.') before outputs' callback saw it)."""
    words = {}
    for p in params:
        own = getattr(p.callback, "empty_message", None)  # an output option's
        if own is not None or _reads_a_path(p):
            words |= dict.fromkeys(p.opts, own or _empty_input)
    texts = [str(a) for a in args]  # a test's runner may pass Path objects
    for i, arg in enumerate(texts):
        if arg == "--":
            return None
        name, eq, value = arg.partition("=")
        if name in words and (value == "" if eq else i + 1 < len(texts) and texts[i + 1] == ""):
            return words[name](name)
    return None


def _empty_input(name: str) -> str:
    return f"{name} is empty; give a file or folder name"


def _reads_a_path(param) -> bool:
    """Whether `param` is an input path option: annotated `Path` (or a list of them; typer
    before ~0.2x: a `click.Path`), not an output option (`wse_cli.outputs`)."""
    import typing
    from pathlib import Path

    if getattr(param.callback, OUTPUT_MARK, None) is not None:
        return False
    descriptor = getattr(param, "type_descriptor", None)
    ann = getattr(descriptor, "annotation", None)
    if ann is None:  # an older typer, on click (already imported by it, not our dependency)
        click = sys.modules.get("click")
        return click is not None and isinstance(getattr(param, "type", None), click.Path)
    return ann is Path or Path in typing.get_args(ann)


def _say(message: str) -> None:
    """Print `message` as the one error line, its unseen characters escaped (`printable`;
    hunt 60: a path holding a newline was two lines, and one holding ESC
    sequences drove the terminal: `wse view $'\\e[2J.npz'` cleared it)."""
    typer.echo(f"Error: {printable(message)}", err=True)


def printable(text: str) -> str:
    """`text` with each control, format or line-separator character (newline, ESC, U+202E)
    written as its escape (\\n, \\x1b, \\u202e); other text as it is."""
    return "".join(
        c.encode("unicode_escape").decode() if unicodedata.category(c) in _UNSEEN else c
        for c in text
    )


_UNSEEN = {"Cc", "Cf", "Zl", "Zp"}  # Unicode's control, format, line and paragraph separators


def _no_backend(e: Exception) -> str | None:
    """One line for JAX failing to start the platforms `JAX_PLATFORMS` names (`nope`: JAX's
    RuntimeError; `cuda` without its plugin: an AssertionError in xla_bridge), else None."""
    platforms = os.environ.get("JAX_PLATFORMS", "")
    device = os.environ.get("JAX_DEFAULT_DEVICE", "")
    if isinstance(e, RuntimeError) and str(e).startswith("Unknown backend") and device:
        # a GPU plugin without a GPU: jax_env checks the rest before the run (hunt 79)
        return (
            f"JAX_DEFAULT_DEVICE={device!r} names a backend JAX did not start: "
            f"{' '.join(str(e).split())}; set JAX_DEFAULT_DEVICE=cpu or unset it"
        )
    if isinstance(e, RuntimeError) and str(e).startswith("Unable to initialize backend"):
        return " ".join(str(e).split())
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if platforms and tb is not None and tb.tb_frame.f_code.co_filename.endswith("xla_bridge.py"):
        return (
            f"JAX cannot start JAX_PLATFORMS={platforms!r} on this machine; set "
            "JAX_PLATFORMS=cpu or unset it"
        )
    return None


_NOTES: list[str] = []  # what the options said about the command's files, said once it ran


def note(text: str) -> None:
    """Say `text` ("note: --png out writes out.png") on stderr once the command has run; a
    refused command says only its one error line."""
    _NOTES.append(text)


def _say_notes() -> None:
    while _NOTES:
        typer.echo(_NOTES.pop(0), err=True)


def _cannot_write(e: OSError) -> str:
    where = f" {e.filename}" if e.filename else ""
    return f"cannot write{where}: {e.strerror}"


def _name_too_long(e: OSError) -> str:
    """A path given that the file system cannot name (a name past 255 bytes, a path past
    4,096): the path's head and length, and the bounds."""
    from wse_core.errors import shown

    where = f" {shown(os.fsdecode(e.filename))}" if e.filename else ""
    return (
        f"the path{where} is too long for this file system (each name of a path at most 255 "
        "bytes, the whole at most 4,096); give a shorter path"
    )


def _one_line_usage(e: Exception) -> None:
    """Raise click's usage error (unknown option or command, a missing option) as one line,
    `Error: ... (see 'wse CMD --help')`, without click's usage and hint lines; a group called
    without a command (NoArgsIsHelpError) still prints its help."""
    usage = [c for c in type(e).__mro__ if c.__name__ == "UsageError"]  # typer's own click
    ctx = getattr(e, "ctx", None)
    if usage and ctx is not None and type(e).__name__ != "NoArgsIsHelpError":
        hint = f" (see '{ctx.command_path} --help')"
        raise usage[0](printable(" ".join(e.format_message().split())) + hint) from None


# Faults of the disk a run writes to (full, over quota, read-only, failing, too large): one
# line and exit code 1, wherever the write is (a file already open has no path to check).
_DISK_FAULTS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG}

_BEFORE_BODY: dict[str, Callable[[], None]] = {}  # run once arguments parse, before a body


def before_body(key: str, fn: Callable[[], None]) -> None:
    """Run `fn` once, after the command's arguments parse and before its body; a later call
    with the same `key` replaces it (the root's deferred multi-process join:
    `wse_cli.multiprocess.join_later`)."""
    _BEFORE_BODY[key] = fn


def _join_then_invoke(cmd: typer.core.TyperCommand, ctx: typer.Context):
    """A command's body, after what `before_body` deferred to it (the multi-process join: its
    arguments are parsed by then, so a refused input never waits for JAX or the coordinator)."""
    while _BEFORE_BODY:
        _BEFORE_BODY.pop(next(iter(_BEFORE_BODY)))()
    return type(cmd).invoke(cmd, ctx)


def fail(message: str) -> None:
    """Stop the command with exit code 2 and `message`."""
    raise UserInputError(message)
