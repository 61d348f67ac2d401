"""Hunt 66: what `--help` says an option accepts is what the command accepts.

Broken before:
- an option whose top is a size limit (`wse_core.host.limits`) showed its own bound, or none,
  in the help: `wse hpc swe|cfd|stencil|md --steps` "an integer in [0, 2147483647]" while
  10,000,001 was refused (the `time_steps` limit), and 2147483647 itself; `--dt-fs` showed
  ">= 0.001" (1,000 fs is the limit), `--gamma`, `--max-num-seqs`, `--devices`, `--nproc`,
  `--wafers`, `--systems` and `--gpus` ">= 1"; none named the variable that lifts the limit;
- `wse hpc stencil --help` gave no default for `--steps` or `--tol`, which depend on the kind
  (and BiCGSTAB's tol on the precision).

Oracles: the command's own refusal (exit 2, one line) of the help's largest value plus one,
the option's own check accepting that largest value, `wse_hpc.stencil.runs.bicgstab_request`
for BiCGSTAB's defaults, and the steps a run without `--steps` reports in its JSON.
"""

from __future__ import annotations

import json
import math
import re
import subprocess

import pytest
import typer
from wse_cli.app import app
from wse_cli.options import NUMBER_MARK
from wse_cli.testing import WSE, clean_env, invoke, refused_in_one_line, walk_commands
from wse_core.host.limits import LIMITS

ROOT = typer.main.get_command(app)
RANGE = re.compile(r"in [\[(]([^,\]]+), ([^\])]+)[\])]")


def _limited() -> list[tuple[tuple[str, ...], object, object]]:
    """(path, command, param) of every numeric option whose top is a size limit."""
    return [
        (path, cmd, p)
        for path, cmd in walk_commands(ROOT)
        for p in cmd.params
        if getattr(getattr(p.callback, NUMBER_MARK, None), "limit", None)
    ]


def _args(path: tuple[str, ...], param, value: str) -> list[str]:
    option = [param.opts[0], value, *["1"] * (param.nargs - 1)]
    return [*option, "wafer", "info"] if not path else [*path, *option]


def _shown(path: tuple[str, ...], param) -> str:
    """The option's help as `wse PATH --help` prints it (whitespace joined)."""
    code, out = invoke(ROOT, [*path, "--help"])
    assert code == 0, out
    text = " ".join(out.split())
    start = text.index(f"{param.opts[0]} <")
    end = text.find(" --", start + len(param.opts[0]) + 1)
    return text[start:end]


def test_every_limited_option_is_found():
    names = {(" ".join(path), p.opts[0]) for path, _, p in _limited()}
    for want in [("hpc swe", "--steps"), ("hpc cfd", "--steps"), ("hpc stencil", "--steps"),
                 ("hpc md", "--steps"), ("hpc md", "--dt-fs"), ("", "--devices"),
                 ("plan infer", "--gamma"), ("infer serve", "--max-num-seqs")]:  # fmt: skip
        assert want in names, want


@pytest.mark.parametrize(
    ("path", "cmd", "param"),
    [pytest.param(*case, id=" ".join([*case[0], case[2].opts[0]])) for case in _limited()],
)
def test_the_helps_largest_value_is_the_largest_accepted(path, cmd, param):
    spec = getattr(param.callback, NUMBER_MARK)
    help_text = _shown(path, param)
    found = RANGE.search(help_text)
    assert found, help_text  # a range with a top, not ">= 1"
    top = spec.kind(float(found.group(2)))
    assert LIMITS[spec.limit].env in help_text, help_text  # the variable that lifts it
    ctx = cmd.context_class(cmd, info_name=path[-1] if path else "wse")
    assert param.callback(ctx, param, top) == top  # the top itself is accepted
    above = top + 1 if spec.kind is int else math.nextafter(top, math.inf)
    refused_in_one_line(ROOT, _args(path, param, repr(above)), param.opts[0])


def test_the_help_follows_the_variable_that_lifts_the_limit():
    env = clean_env(WSE_LIMIT_TIME_STEPS="20000000")
    done = subprocess.run([*WSE, "hpc", "swe", "--help"], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "[0, 20000000]; WSE_LIMIT_TIME_STEPS lifts the top" in " ".join(done.stdout.split())


def _stencil_help(option: str) -> str:
    param = next(p for p in ROOT.commands["hpc"].commands["stencil"].params if option in p.opts)
    return _shown(("hpc", "stencil"), param)


def test_stencil_help_gives_bicgstabs_defaults():
    from wse_core import preset
    from wse_hpc.stencil.config import StencilConfig
    from wse_hpc.stencil.runs import bicgstab_request

    def request(dtype):
        return bicgstab_request(
            StencilConfig(kind="bicgstab", grid=(8, 8, 8), spec=preset("wse2"), dtype=dtype)
        )

    (_, mixed_tol, cap), (_, fp32_tol, _) = request("mixed"), request("fp32")
    tol = re.search(r"default: (\S+) mixed, (\S+) fp32\)", _stencil_help("--tol"))
    assert tol and (float(tol.group(1)), float(tol.group(2))) == (mixed_tol, fp32_tol)
    steps = re.search(r"iteration cap \(default: (\d+)\)", _stencil_help("--steps"))
    assert steps and int(steps.group(1)) == cap


@pytest.mark.parametrize(("kind", "grid"), [("jacobi", 8), ("heat", 8), ("wave25", 8)])
def test_stencil_help_gives_each_kinds_default_steps(kind, grid):
    defaults = re.search(r"default: (\d+) for jacobi and heat, (\d+) for wave25",
                         _stencil_help("--steps"))  # fmt: skip
    assert defaults
    said = int(defaults.group(2 if kind == "wave25" else 1))
    code, out = invoke(ROOT, ["hpc", "stencil", "--kind", kind, "--grid", *[grid] * 3, "--json"])
    assert code == 0, out
    assert json.loads(out[out.index("{") :])["steps"] == said


def test_a_malformed_memory_variable_is_still_one_line_now_that_help_reads_limits():
    # the help's ranges are read when the commands' modules load: a default read from a
    # malformed WSE_HOST_MEMORY_BYTES was a traceback there, before the variables' check
    done = subprocess.run(
        [*WSE, "wafer", "info"],
        env=clean_env(WSE_HOST_MEMORY_BYTES="\u0661\u0660\u0660"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert (done.stdout + done.stderr).strip().splitlines() == [
        "Error: WSE_HOST_MEMORY_BYTES must be a number of bytes, got '\u0661\u0660\u0660'"
    ]
