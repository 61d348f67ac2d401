"""The one type of every output option: a path checked when the option is parsed.

Every option that names a file or folder a command writes is declared with `output_file` or
`output_dir` (a `typer.Option`), so a path that cannot be written is refused before the
command does any work, with one line and exit code 2:

    Error: --png /tmp is a folder; give a file name, e.g. /tmp/wafer.png
    Error: --out /proc/x/run.xyz cannot be written: /proc takes no new files (No such file
    or directory); give a path in a writable folder

- `output_file(default, "--png", suffix=".png")`: not an existing folder, device, FIFO or
  socket (/dev/null excepted), as given, before any suffix; an existing file must be
  writable, and its folder must take a new file (the writers replace a file through a new
  one beside it: /proc, /sys and read-only folders take none); else the nearest existing
  folder above it must be writable (folders between are created by the writer, after the
  work, so a refused command leaves nothing behind).
  With `suffix`, a name without it (in any case: Map.PNG has it) gets it, and the command
  says so on stderr once it has run ("note: --png out writes out.png"; a refused command
  prints only its error line); with `suffix`, /dev/null draws nothing (the writer would add
  the suffix: /dev/null.png), and a required one (`compress --out`, whose file is what the
  command makes) refuses it. A name ending in '/' means a folder and is refused.
- `png_file(default, "--png")`: `output_file` with suffix ".png".
- `output_dir(default, "--out")`: an existing path must be a writable folder, else the
  nearest existing folder above it must be writable. Nothing is created here.
- A relative path where the current folder was deleted (the shell still stands in it) is
  refused by both, naming the folder's loss.
- A name holding a newline or another control character, or naming a file or folder of
  only spaces, is refused by both, shown with escapes: `--out 'a\\nb.json' contains a
  newline; ...` (it would split the command's one-line reports).
- An empty path ('') is refused by both (click would read it as '.', the current folder),
  and so is a symbolic link that cannot be followed (a loop, a dangling link) or a path
  under one (the writer would fail after the work), and a path under a folder that cannot
  be entered (mode 000: `--png z/a.png` was a PermissionError traceback):

    Error: --png z/a.png cannot be written: z cannot be entered (permission denied); give
    a path in a folder you can write

Each option's callback carries the attribute `option_names.OUTPUT_MARK` (its kind, "file"
or "dir"), so a test can find every output option of every command, as
`options.NUMBER_MARK` finds every numeric one.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import Any

import typer

from wse_cli.errors import UserInputError, note
from wse_cli.option_names import OUTPUT_MARK

__all__ = [
    "output_file",
    "output_dir",
    "png_file",
    "check_writable",
    "refuse_overlap",
]


def _nearest_existing(path: Path) -> Path:
    """The nearest folder above `path` that is there, a link that cannot be followed included
    (hunt 60: past a link loop the writer's makedirs failed after the work)."""
    p = path.absolute().parent
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def _cwd_exists() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:  # removed under the shell that still stands in it
        return False
    return True


def _enterable(path: Path, name: str) -> None:
    """Refuse `path` under a folder that cannot be entered (no search permission: mode 000,
    or another user's 0700), naming that folder: every question asked of the path (is_dir,
    exists) raised PermissionError (hunt 67: a traceback for a user other than root)."""
    if _can_stat(path):
        return
    closed = next(p for p in (*reversed(path.parents), path) if not _can_stat(p)).parent
    raise UserInputError(
        f"{name} {path} cannot be written: {closed} cannot be entered (permission denied); "
        "give a path in a folder you can write"
    )


def _can_stat(path: Path) -> bool:
    """Whether a question about `path` gets an answer: it is there, or it is not (or a broken
    link, which `check_writable` refuses in its own words)."""
    try:
        os.lstat(path)
    except PermissionError:
        return False
    except OSError:
        return True
    return True


def check_writable(path: Path, *, kind: str, name: str, suffix: str | None = None) -> None:
    """Raise UserInputError unless `path` can be written as a `kind` ("file" or "dir")."""
    if not path.is_absolute() and not _cwd_exists():  # hunt 65: os.getcwd's traceback
        raise UserInputError(
            "the current folder no longer exists (deleted); cd to a folder that exists or "
            f"give {name} an absolute path"
        )
    _enterable(path, name)
    if os.path.islink(path) and not path.exists():  # hunt 60: the writer's traceback
        try:
            os.stat(path)
        except OSError as e:
            raise UserInputError(
                f"{name} {path} is a symbolic link that cannot be followed ({e.strerror}); "
                "remove it or give another name"
            ) from None
    if kind == "file" and path.is_dir():
        example = path / f"output{suffix or ''}"
        raise UserInputError(f"{name} {path} is a folder; give a file name, e.g. {example}")
    if kind == "dir" and path.exists() and not path.is_dir():
        raise UserInputError(f"{name} {path} is a file; give a folder")
    if kind == "file":
        _refuse_special(path, name)
    if path.exists():
        if not os.access(path, os.W_OK | (os.X_OK if kind == "dir" else 0)):
            raise UserInputError(f"{name} {path} cannot be written (permission denied)")
        if kind == "dir":
            _probe(path, name, path)
        elif str(path) != os.devnull:  # written in place, not replaced
            _probe(_replaced_in(path), name, path, replaced=True)
        return
    above = _nearest_existing(path)
    if not above.is_dir() or not os.access(above, os.W_OK | os.X_OK):
        raise UserInputError(f"{name} {path} cannot be written: {above} is not a writable folder")
    _probe(above, name, path)


def _refuse_special(path: Path, name: str) -> None:
    """Refuse a device, FIFO or socket at `path` (a FIFO blocks the writer, a device is no
    file to keep), /dev/null alone excepted: what is written there is thrown away."""
    if path.exists() and not path.is_file() and not path.is_dir() and str(path) != os.devnull:
        from wse_core.host.readers import not_regular  # only here: the CLI starts without it

        raise UserInputError(f"{name} {path} {not_regular(path)}; give a file name")


def _refuse_odd_name(value: str, name: str, word: str, example: str) -> None:
    """Refuse a name holding a line break or another control character, or naming a file
    or folder of only spaces: a paste error, almost always (hunt 67: `--out $'a\\nb.json'`
    split the one-line "saved" report in two; `--png ' '` wrote ' .png')."""
    odd = next((c for c in value if unicodedata.category(c) in _BREAKING), None)
    if odd is not None:
        what = "a newline" if odd == "\n" else f"a control character ({ascii(odd)[1:-1]})"
        raise UserInputError(
            f"{name} {value!r} contains {what}; give a {word} name of printable characters, "
            f"e.g. {example}"
        )
    if any(not part.strip() for part in value.split(os.sep) if part):
        raise UserInputError(
            f"{name} {value!r} names a file or folder of only spaces; give a {word} name, "
            f"e.g. {example}"
        )


_BREAKING = {"Cc", "Zl", "Zp"}  # Unicode's control characters, line and paragraph separators


def _replaced_in(path: Path) -> Path:
    """The folder where the writer makes the new file that replaces the file `path`: the
    folder of what a link points at (`wse_core.host.atomic` follows it), else `path`'s."""
    return Path(os.path.realpath(path)).parent if os.path.islink(path) else path.absolute().parent


def _probe(folder: Path, name: str, path: Path, *, replaced: bool = False) -> None:
    """Make and remove an empty folder in `folder`: os.access says yes to root everywhere,
    but /proc, /sys and read-only mounts refuse new entries (the writer would fail after
    the work, with a traceback). `replaced`: `path` is a file there, which the writers
    replace through a new file beside it (hunt 67: `--out /proc/self/mem` was accepted, then
    a FileNotFoundError traceback after the work)."""
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(prefix=".wse-probe-", dir=folder))
    except OSError as e:
        how = ", and the file is replaced through a new one beside it" if replaced else ""
        raise UserInputError(
            f"{name} {path} cannot be written: {folder} takes no new files "
            f"({e.strerror or e}){how}; give a path in a writable folder"
        ) from None


class _Empty(str):
    """What `_path` makes of an empty argument: click would make it Path('.'), the current
    folder (hunt 58: `--out ''` wrote into it, `--png ''` named '.')."""


class _Folder(str):
    """What `_path` makes of a name ending in '/': a folder is meant, which Path would drop
    (hunt 64: `--png newdir/` wrote newdir.png)."""


def _path(value: Any) -> Any:
    if isinstance(value, str) and value.endswith(os.sep) and value.strip(os.sep):
        return _Folder(value)
    return _Empty() if value == "" else value if isinstance(value, Path) else Path(value)


def _option(kind: str, default: Any, names: tuple[str, ...], suffix: str | None, **kw: Any):
    example = f"output{suffix or ''}" if kind == "file" else "out"
    word = "file" if kind == "file" else "folder"

    def empty(name: str) -> str:
        return f"{name} is empty; give a {word} name, e.g. {example}"

    def check(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        name = param.opts[0] if param.opts else str(param.name)
        if isinstance(value, _Empty):
            raise UserInputError(empty(name))
        if value is None:
            return value
        _refuse_odd_name(str(value), name, word, example)
        path = Path(value)
        _enterable(path, name)  # before is_dir below asks
        if kind == "file" and isinstance(value, _Folder) and not path.is_dir():
            raise UserInputError(
                f"{name} {value} ends in '{os.sep}', a folder; give a file name, "
                f"e.g. {path / example}"
            )
        if suffix and str(path) == os.devnull:  # the writer would add it: /dev/null.png
            if default is ...:  # hunt 67: `compress --out /dev/null`, a TypeError at the end
                raise UserInputError(
                    f"{name} {os.devnull} would keep nothing, and this file is what the "
                    f"command makes; give a file name, e.g. {example}"
                )
            return None  # nothing drawn: the picture is thrown away
        if kind == "file":  # as given, before a suffix (hunt 67: /dev/zero wrote /dev/zero.png)
            _refuse_special(path, name)
        # any case: Map.PNG is a PNG (hunt 64: it wrote Map.PNG.png)
        if suffix and not path.name.lower().endswith(suffix) and not path.is_dir():
            path = path.with_name(path.name + suffix)
            note(f"note: {name} {value} writes {path}")
        check_writable(path, kind=kind, name=name, suffix=suffix)
        return path

    setattr(check, OUTPUT_MARK, kind)
    # typer before ~0.2x converts the parser's value to the annotation's Path ('' -> '.')
    # before the callback sees it: `wse_cli.errors.empty_path` refuses '' from the
    # arguments themselves, in these words
    check.empty_message = empty  # type: ignore[attr-defined]
    kw.setdefault("metavar", "<path>")  # the house's help metavar (a parser hides the type)
    return typer.Option(default, *names, callback=check, parser=_path, **kw)


def output_file(default: Any, *names: str, suffix: str | None = None, **option: Any) -> Any:
    """A `typer.Option` for a file the command writes (module docstring)."""
    return _option("file", default, names, suffix, **option)


def output_dir(default: Any, *names: str, **option: Any) -> Any:
    """A `typer.Option` for a folder the command writes into (module docstring)."""
    return _option("dir", default, names, None, **option)


def png_file(default: Any, *names: str, **option: Any) -> Any:
    """`output_file` of a PNG picture (".png" added when the name lacks it)."""
    return _option("file", default, names, ".png", **option)


def _same(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)  # resolve() raised on a link loop


def refuse_overlap(inputs: dict[str, Path | None], outputs: dict[str, Path | None]) -> None:
    """Refuse an output that is one of the command's inputs (writing it would destroy the
    input: `wse view t.npz --out t.npz`) or another of its outputs (one would be lost)."""
    outs = [(n, p) for n, p in outputs.items() if p is not None]
    for i, (name, path) in enumerate(outs):
        for other, src in inputs.items():
            if src is not None and _same(path, src):
                raise UserInputError(
                    f"{name} {path} is the input {other}; writing it would destroy the input: "
                    "give another name"
                )
        for other, path2 in outs[:i]:
            if _same(path, path2):
                raise UserInputError(f"{name} and {other} are both {path}; give two names")
