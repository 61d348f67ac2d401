"""XLA_FLAGS read as XLA reads them and checked before it does: one line instead of XLA's
fatal log (hunt 78).

XLA parses XLA_FLAGS when its first client or compile options are made (JAX's backend
start; `xla/parse_flags_from_env.cc`). A value whose first non-blank character is not `-`
is the name of a flags file. Otherwise XLA reads words from the start while each begins with
`-` (split at whitespace; `--name="a b"` and `--name='a b'` keep their spaces) and stops
at the first word that does not: that word and everything after it are ignored, silently
(`--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`, a recipe from JAX's
issues, runs as its first flag alone). Each word read must be a flag XLA knows with a value
it can read, or XLA kills the process: `Unknown flag in XLA_FLAGS: --nope` as a fatal log,
a bad value (`--xla_cpu_use_thunk_runtime=maybe`) with its 94-line flag list.

Contract.
- `split(value)`: (the words XLA reads, the rest it ignores), as XLA splits them.
- `check_words(environ)` raises a WseError, without XLA, for a value XLA would read as a
  flags file (the stack adds its own flag to XLA_FLAGS, which would turn the file's name into
  another: `XLA_FLAGS=ab` was `Could not open file "ab --xla_llvm_disable_expensive_passes=
  true"`; the message names its first character where that is a space XLA does not skip),
  for a word read that is no `--name` (XLA: an unknown flag), for a bad value of a flag the
  stack sets itself (`ask_xla` asks XLA of no such flag: `--xla_llvm_disable_expensive_passes
  =maybe` was XLA's 94-line fatal log), and for an `--xla_dump_to` that is no folder XLA can
  make or write (XLA said so in two C++ log lines per program, ran on and dumped nothing).
- `ask_xla(environ)` raises a WseError where XLA refuses the flags it reads: asked of XLA
  itself, in a helper process (`jaxlib`'s compile options parse XLA_FLAGS as the backend
  will; ~0.2-0.4 s), only where they hold flags other than the ones the stack sets itself
  (`OWN_FLAGS`), so a run without XLA_FLAGS, or with only those, costs nothing.
- `note_ignored(environ)` says on stderr, in one line, what XLA will ignore (XLA says
  nothing).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Mapping

from wse_core.errors import WseError, shown

__all__ = ["OWN_FLAGS", "ask_xla", "check_words", "flag", "note_ignored", "split", "words"]

# the flags the stack sets or reads itself (runtime.configure, jax_env.xla_device_count)
OWN_FLAGS = frozenset({"xla_force_host_platform_device_count", "xla_llvm_disable_expensive_passes"})
_WS = " \t\r\n"  # XLA's kWS
_PROBE = "import jaxlib._jax as j; j.CompileOptions()"  # parses XLA_FLAGS, as the backend does
_PROBE_S = 60
_BOOLS = frozenset({"xla_llvm_disable_expensive_passes"})  # own flags that are bools
_TRUTH = ("true", "false", "1", "0")  # tsl's bool flag values, any case (probed of XLA)
_DUMP_WORDS = ("sponge", "test_undeclared_outputs_dir")  # XLA's own, not folders


def split(value: str) -> tuple[list[str], str]:
    """(the words XLA reads, the rest it ignores, stripped) of an XLA_FLAGS value, by XLA's
    own scan (`ParseArgvFromString`); a word keeps its quotes. A flags file's name (first
    non-blank character not `-`) is all rest."""
    read: list[str] = []
    b, n = _skip(value, 0), len(value)
    while b < n and value[b] == "-":
        e = b
        while e < n and value[e].isascii() and (value[e] in "-_" or value[e].isalnum()):
            e += 1
        if e + 1 < n and value[e] == "=" and value[e + 1] in "'\"":  # --name="a b"
            quote, e = value[e + 1], e + 2
            while e < n and value[e] != quote:
                e += 2 if quote == '"' and value[e] == "\\" and e + 1 < n else 1
            e = min(e + 1, n)
        else:
            while e < n and value[e] not in _WS:
                e += 1
        read.append(value[b:e])
        b = _skip(value, e)
    return read, value[b:].strip(_WS)


def _skip(value: str, at: int) -> int:
    while at < len(value) and value[at] in _WS:
        at += 1
    return at


def words(value: str) -> list[str]:
    """The words of XLA_FLAGS that XLA reads (`split`)."""
    return split(value)[0]


def flag(word: str) -> tuple[str, str]:
    """(name, value) of a word XLA reads, its value's quotes taken off as XLA takes them."""
    name, _, value = word.lstrip("-").partition("=")
    if value[:1] in ("'", '"'):
        quote, value = value[0], value[1:].removesuffix(value[0])
        if quote == '"':
            value = re.sub(r"\\(.)", r"\1", value)
    return name, value


def check_words(environ: Mapping[str, str] = os.environ) -> None:
    """Refuse, without XLA, an XLA_FLAGS that XLA reads as a flags file or a word it reads
    that is no `--name` flag (module doc)."""
    value = environ.get("XLA_FLAGS", "")
    read, rest = split(value)
    if not read and rest:
        first = rest[0]
        what = (  # hunt 79: '\v--xla_dump_to=x' named '--xla_dump_to=x' as "no flag"
            f"starts with {shown(first)}, a space XLA does not skip (only {shown(_WS)})"
            if first.isspace() or not first.isprintable()
            else f"starts with {shown(re.split(f'[{_WS}]', rest)[0])}, no --flag"
        )
        raise WseError(
            f"XLA_FLAGS {what}, and XLA reads such a value as the name of a flags file, which "
            "wse does not take (it adds its own flag to XLA_FLAGS); give the flags themselves "
            "as --name=value, or unset XLA_FLAGS"
        )
    for word in read:
        if not word.startswith("--") or len(word) == 2:  # XLA: "Unknown flag"
            raise WseError(
                f"XLA_FLAGS: {shown(word)} is no flag; give each as --name=value (e.g. "
                "--xla_dump_to=DIR), or unset XLA_FLAGS"
            )
    for word in read:
        name, got = flag(word)
        if name in _BOOLS and "=" in word and got.lower() not in _TRUTH:
            raise WseError(  # hunt 79: XLA's 94-line fatal log (ask_xla asks XLA of no own flag)
                f"XLA_FLAGS: --{name} must be true or false (1/0, any case; the bare flag is "
                f"true); got {shown(got)}; fix it, or unset XLA_FLAGS"
            )
    dumps = [got for name, got in map(flag, read) if name == "xla_dump_to"]
    if dumps:
        _check_dump_folder(dumps[-1])  # the last, as XLA takes it


def _check_dump_folder(raw: str) -> None:
    """Refuse an `--xla_dump_to` XLA cannot make a folder of (hunt 79: a file or /proc/nope/x
    ran, exit 0, with two C++ error lines per compiled program and nothing dumped). XLA's
    words of its own (`-`: stdout; sponge, test_undeclared_outputs_dir) and a URL pass; the
    probe makes and removes a temporary folder in it or in its nearest existing parent (root
    writes where os.access says no, and os.access says yes under /proc)."""
    import tempfile

    if not raw or raw == "-" or raw.lower() in _DUMP_WORDS or "://" in raw:
        return
    path = os.path.abspath(raw)
    above = path
    while not os.path.lexists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    try:
        if not os.path.isdir(above):
            what = "is" if above == path else f"is under {shown(above, head=240)}, which is"
            raise NotADirectoryError(0, f"it {what} {_no_folder(above)}")
        os.rmdir(tempfile.mkdtemp(prefix=".wse-probe-", dir=above))
    except OSError as e:
        why = e.strerror if e.errno == 0 else f"cannot make a folder in {above}: {e.strerror}"
        raise WseError(
            f"XLA_FLAGS: --xla_dump_to={shown(raw, quote=False, head=240)} is no folder XLA "
            f"can make or write ({why}); give a writable folder, or unset XLA_FLAGS"
        ) from None


def _no_folder(path: str) -> str:
    """What `path`, which exists (or is a link) and is no folder, is: a symbolic link to
    nothing (review 80: it was called a file), a file, a device, a FIFO or a socket."""
    import stat

    if not os.path.exists(path):  # lexists: a link that leads to nothing
        target = os.readlink(path)
        where = os.path.join(os.path.dirname(path), target)  # a relative target: from the link
        ends = ("does not exist" if not os.path.lexists(where)
                else "leads to nothing: a chain of links that ends nowhere or loops")  # fmt: skip
        return f"a symbolic link to {shown(target, head=240)}, which {ends}"
    mode = os.stat(path).st_mode
    kinds = ((stat.S_ISCHR, "device"), (stat.S_ISBLK, "device"), (stat.S_ISFIFO, "FIFO"),
             (stat.S_ISSOCK, "socket"))  # fmt: skip
    return f"a {next((k for test, k in kinds if test(mode)), 'file')}, not a folder"


def note_ignored(environ: Mapping[str, str] = os.environ) -> None:
    """One line on stderr naming what XLA ignores in XLA_FLAGS, where it ignores anything."""
    read, rest = split(environ.get("XLA_FLAGS", ""))
    if read and rest:
        with contextlib.suppress(AttributeError, OSError, ValueError):  # a closed stderr
            sys.stderr.write(
                f"note: XLA ignores {shown(rest)} in XLA_FLAGS (it reads flags only up to the "
                "first word that is no --flag)\n"
            )
            sys.stderr.flush()


def ask_xla(environ: Mapping[str, str] = os.environ) -> None:
    """Refuse the flags XLA reads where XLA refuses them, asked in a helper process; a no-op
    where it reads only the stack's own flags (module doc)."""
    if all(flag(w)[0] in OWN_FLAGS for w in words(environ.get("XLA_FLAGS", ""))):
        return
    import subprocess  # only here: a run without foreign flags never needs it

    env = dict(environ)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_PROBE_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):  # no verdict: XLA says it at its start
        return
    if done.returncode != 0:
        raise WseError(_line(done.stderr, env.get("XLA_FLAGS", "")))


def _line(log: str, flags: str) -> str:
    """One line for XLA's refusal in `log` (its stderr)."""
    where = "or unset XLA_FLAGS"
    if m := re.search(r"Unknown flags? in XLA_FLAGS: (\S+)", log):
        return f"XLA_FLAGS: unknown flag {shown(m[1])}; give flags XLA knows, {where}"
    if m := re.search(r"Couldn't interpret value (.*) for flag (\w+)\.", log):
        value, name = m[1], m[2]
        kind = re.search(rf"^\s*--{name}=(\S*)\s+(\w+)\t", log, re.MULTILINE)
        wanted = f"a {kind[2]} (default {kind[1]})" if kind else "a value it reads"
        return f"XLA_FLAGS: --{name} must be {wanted}; got {shown(value)}; fix it, {where}"
    said = [ln for ln in log.splitlines() if re.match(r"[FE]\d{4} ", ln)]
    why = said[-1].partition("] ")[2] if said else (log.strip().splitlines() or ["?"])[-1]
    return f"XLA cannot start with XLA_FLAGS={shown(flags)}: {why}"
