"""XLA_FLAGS checked before XLA reads them: one line instead of XLA's fatal log (hunt 78).

XLA parses XLA_FLAGS when its first client or compile options are made (JAX's backend
start) and kills the process on anything it cannot take: `Unknown flag in XLA_FLAGS:
--nope` as a fatal log, a bad value (`--xla_cpu_use_thunk_runtime=maybe`) with its 94-line
flag list, and a value that does not start with `-` read as the name of a flags file
(`XLA_FLAGS=ab` was `Could not open file "ab --xla_llvm_disable_expensive_passes=true"`:
the stack's own flag glued onto the name).

Contract. `check(environ)` raises a WseError for the first of:
- a word that is not a `--name[=value]` flag (XLA's flags file is not taken: the stack adds
  its own flag to XLA_FLAGS, which would turn the file's name into another one);
- a flag XLA does not know or a value it cannot read: asked of XLA itself, in a helper
  process (`jaxlib`'s compile options parse XLA_FLAGS as the backend will; ~0.4 s), only
  where XLA_FLAGS holds flags other than the ones the stack itself sets (`OWN_FLAGS`), so a
  run without XLA_FLAGS, or with only those, costs nothing.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

from wse_core.errors import WseError, shown

__all__ = ["OWN_FLAGS", "check", "words"]

# the flags the stack sets or reads itself (runtime.configure, jax_env.xla_device_count)
OWN_FLAGS = frozenset({"xla_force_host_platform_device_count", "xla_llvm_disable_expensive_passes"})
_WORD = re.compile(r'(?:[^\s"]|"[^"]*")+')  # XLA's own split: whitespace, "quoted" values
_PROBE = "import jaxlib._jax as j; j.CompileOptions()"  # parses XLA_FLAGS, as the backend does
_PROBE_S = 60


def words(value: str) -> list[str]:
    """XLA_FLAGS' words, as XLA splits them (a double-quoted value keeps its spaces)."""
    return _WORD.findall(value)


def check(environ: Mapping[str, str] = os.environ) -> None:
    """Refuse XLA_FLAGS that XLA would die on (module doc); a no-op where it holds only the
    stack's own flags."""
    flags = words(environ.get("XLA_FLAGS", ""))
    for word in flags:
        if not word.startswith("--") or len(word) == 2:
            raise WseError(
                f"XLA_FLAGS: {shown(word)} is no flag; give each as --name=value (e.g. "
                "--xla_dump_to=DIR), or unset XLA_FLAGS (XLA reads a value that does not "
                "start with - as a flags file, which wse does not take: put its flags in "
                "XLA_FLAGS)"
            )
    if all(w[2:].partition("=")[0] in OWN_FLAGS for w in flags):
        return
    _ask_xla(dict(environ))


def _ask_xla(env: dict[str, str]) -> None:
    """Parse XLA_FLAGS in a helper process, whose fatal log becomes one line."""
    import subprocess  # only here: a run without foreign flags never needs it

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
    if m := re.search(r"Unknown flag in XLA_FLAGS: (\S+)", log):
        return f"XLA_FLAGS: unknown flag {shown(m[1])}; give flags XLA knows, {where}"
    if m := re.search(r"Couldn't interpret value (.*) for flag (\w+)\.", log):
        value, name = m[1], m[2]
        kind = re.search(rf"^\s*--{name}=(\S*)\s+(\w+)\t", log, re.MULTILINE)
        wanted = f"a {kind[2]} (default {kind[1]})" if kind else "a value it reads"
        return f"XLA_FLAGS: --{name} must be {wanted}; got {shown(value)}; fix it, {where}"
    said = [ln for ln in log.splitlines() if re.match(r"[FE]\d{4} ", ln)]
    why = said[-1].partition("] ")[2] if said else (log.strip().splitlines() or ["?"])[-1]
    return f"XLA cannot start with XLA_FLAGS={shown(flags)}: {why}"
