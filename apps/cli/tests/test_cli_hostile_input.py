"""Numbers that are not numbers, and inputs checked before the first line of output.

Every numeric option of every `wse` command is declared with `wse_cli.options.number`; each
one, given inf, NaN, text, a fraction for an integer, or a value past either bound (drawn by
hypothesis from what that option's `NumberSpec` refuses), exits 2 with one line naming the
option, before the command does any work. The type itself is checked against an independent
oracle (`decimal.Decimal`) on random bounds. The issue's cases run through the CLI too."""

from __future__ import annotations

import decimal
import inspect
import math
import os
import typing
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from wse_cli.app import app
from wse_cli.errors import WseGroup
from wse_cli.options import NUMBER_MARK, NumberSpec, number
from wse_cli.testing import invoke, walk_commands

runner = CliRunner()
ROOT = typer.main.get_command(app)  # built once: typer's runner rebuilds it on every call


def _invoke(args: list, env: dict[str, str] | None = None) -> tuple[int, str]:
    return invoke(ROOT, args, env)


def _commands():
    return walk_commands(ROOT)


def _numeric(cmd, param) -> bool:
    """Whether the command's function annotates `param` int, float or a tuple of them.

    Read from the function itself (typer wraps it with functools.update_wrapper), not from
    typer's parameter objects, whose private fields change between typer versions (0.29's
    `type_descriptor` is absent from older ones)."""
    if cmd.callback is None:
        return False
    ann = typing.get_type_hints(inspect.unwrap(cmd.callback)).get(param.name)
    types = typing.get_args(ann) or (ann,)
    return all(t in (int, float) for t in types)


NUMERIC = [(path, p) for path, cmd in _commands() for p in cmd.params if _numeric(cmd, p)]
IDS = [" ".join((*path, param.opts[0])) for path, param in NUMERIC]


def test_every_numeric_option_is_a_number_option():
    assert len(NUMERIC) >= 70  # every command's: train, plan, infer, hpc, wafer, launch, ...
    plain = [i for i, (_, p) in zip(IDS, NUMERIC, strict=True) if not _spec(p)]
    assert not plain, f"numeric options not declared with wse_cli.options.number: {plain}"


def _spec(param) -> NumberSpec | None:
    return getattr(param.callback, NUMBER_MARK, None)


def _refused_values(spec: NumberSpec) -> list[str]:
    """Values `spec` refuses, written as a user would type them."""
    out = ["inf", "-inf", "nan", "NaN", "1e999", "-1e999", "abc", "1,5", "0x10"]
    if spec.kind is int:
        out += ["2.5", "1e-3", "-0.5", str(2**70), str(-(2**70)), "1e100000000"]
    if spec.ge is not None:
        out += [repr(spec.ge - 1), repr(spec.ge - 0.5) if spec.kind is float else "", "-1e300"]
        out.append(str(-(2**70)))
    if spec.gt is not None:
        out += [repr(spec.gt), repr(spec.gt - 1), "-1e300"]
    if spec.le is not None:
        out += [repr(max(spec.le + 1, spec.le * 2)), "1e300"]  # le + 1 == le past 2**53
        out += [str(2**70)] if spec.le < 2**70 else []  # --g's 1e30 holds 2**70
    if spec.lt is not None:
        out += [repr(spec.lt), repr(spec.lt + 1)]
    return [v for v in out if v]


def _args(path, param, value: str) -> list[str]:
    option = [param.opts[0], value, *["1"] * (param.nargs - 1)]
    return [*option, "wafer", "info"] if not path else [*path, *option]


@pytest.mark.parametrize(("path", "param"), NUMERIC, ids=IDS)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_a_refused_number_is_one_line_and_exit_2(path, param, data):
    spec = _spec(param)
    assert spec is not None
    value = data.draw(st.sampled_from(_refused_values(spec)))
    code, output = _invoke(_args(path, param, value))
    assert code == 2, (value, output)
    lines = output.strip().splitlines()
    assert len(lines) == 1, lines
    # past a size limit, even past the type's range too, the limit's refusal (hunt 67)
    over = f"Error: {param.opts[0]} is " if spec.limit else None
    over = over is not None and lines[0].startswith(over) and ", over the limit of " in lines[0]
    assert lines[0].startswith(f"Error: {param.opts[0]} must be") or over, lines


# --- the type against an oracle --------------------------------------------------------
def _oracle(text: str, kind: type, lo, hi, lo_open: bool, hi_open: bool):
    """What `number` should return for `text` (None: refused), by decimal arithmetic."""
    try:
        d = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        return None
    if not d.is_finite() or (kind is int and (abs(d) >= 2**63 or d % 1 != 0)):
        return None
    x = int(d) if kind is int else float(d)
    if kind is float and not math.isfinite(x):
        return None
    if lo is not None and (x <= lo if lo_open else x < lo):
        return None
    if hi is not None and (x >= hi if hi_open else x > hi):
        return None
    return x


BOUND = st.one_of(st.none(), st.integers(-1000, 1000))
TEXT = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["inf", "nan", "-inf", "1e999", "abc", "", " 7 ", "1e3", "2.5", "-0"]),
)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from([int, float]),
    lo=BOUND,
    hi=BOUND,
    lo_open=st.booleans(),
    hi_open=st.booleans(),
    text=TEXT,
)
def test_number_accepts_exactly_what_the_oracle_accepts(kind, lo, hi, lo_open, hi_open, text):
    bounds = {("gt" if lo_open else "ge"): lo, ("lt" if hi_open else "le"): hi}
    seen = []
    group = typer.Typer(cls=WseGroup)

    @group.command("one")
    def one(x: float = number(None, "--x", kind=kind, **bounds)) -> None:  # type: ignore[valid-type]
        seen.append(x)

    group.command("other")(lambda: None)  # two commands: "one" stays a subcommand
    r = runner.invoke(group, ["one", "--x", text])
    want = _oracle(text, kind, lo, hi, lo_open, hi_open)
    if want is None:
        assert r.exit_code == 2 and r.output.startswith("Error: --x must be"), r.output
        assert len(r.output.strip().splitlines()) == 1
    else:
        assert r.exit_code == 0, r.output
        assert seen == [want] and type(seen[0]) is kind


# --- the issue's cases ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "train", "--model", "llama3-8b", "--tokens", "inf"], "--tokens must be"),
        (["plan", "infer", "--model", "llama3-70b", "--tokens-per-day", "inf"], "--tokens-per-"),
        (["plan", "train", "-m", "llama3-8b", "--tokens", "1e12", "--usd-per-kwh", "nan"], "kwh"),
        (["plan", "train", "-m", "llama3-8b", "--tokens", "1e12", "--usd-per-kwh", "-1"], "kwh"),
        (["infer", "serve", "--model_dir", "mock", "--port", "99999"], "--port must be"),
        (["infer", "generate", "--model_dir", "x", "--seed", str(2**70)], "--seed must be"),
    ],
)
def test_the_issues_numbers_are_refused(args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and message in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


@pytest.fixture(scope="module")
def cu_potential(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("md") / "CuNi.eam.alloy"
    r = runner.invoke(app, ["hpc", "md", "potential", "--elements", "Cu", "Ni", "--out", out])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--element", "Xx"], "no parameters for Xx"),
        (["--element", "Cu", "--steps", "-1"], "--steps must be"),
        (["--element", "Cu", "--steps", "2", "--temperature-K", "-300"], "--temperature-K"),
        (["--element", "Cu", "--steps", "2", "--dt-fs", "0"], "--dt-fs must be"),
    ],
)
def test_md_checks_every_input_before_its_banner(cu_potential, extra, message):
    base = ["hpc", "md", "--lattice", "fcc", "--a", "3.615", "--cells", "2", "2", "2"]
    r = runner.invoke(app, [*base, "--potential", str(cu_potential), *extra])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [r.output.strip()] and message in r.output


def test_train_model_dir_that_is_a_file_or_cannot_be_made(tmp_path):
    a_file = tmp_path / "taken"
    a_file.write_text("not a folder")
    unwritable = Path("/sys/wse-test-model-dir") if os.geteuid() == 0 else tmp_path / "ro" / "d"
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o555)
    for model_dir, message in ((a_file, "is a file"), (unwritable, "cannot be written")):
        r = runner.invoke(app, ["train", "tiny", "--model_dir", str(model_dir)])
        assert r.exit_code == 2 and message in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
