"""One option spelling (dashes) with the underscore spelling as a hidden alias
(`wse_cli.option_names`): both parse to the same option, on a leaf command, on a group's own
options and at the root; `--help` and every declaration show only the dash form; what follows
a bare `--` and unknown options are left as typed."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import typer
from typer.core import TyperGroup
from typer.testing import CliRunner
from wse_cli.app import app
from wse_cli.option_names import dashed

runner = CliRunner()


class _Declared(NamedTuple):
    """An option declared with an underscore: it is left alone."""

    opts: list[str]
    secondary_opts: tuple = ()
    param_type_name: str = "option"


def _commands(cmd, path: str = "wse"):
    yield path, cmd
    if isinstance(cmd, TyperGroup):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, f"{path} {name}")


def test_dashed_by_hand():
    root = typer.main.get_command(app)
    params = [*root.commands["infer"].commands["generate"].params, _Declared(["--a_b"])]
    args = ["--model_dir", "d", "--top_k=3", "--a_b", "1", "--no_such", "--", "--model_dir"]
    assert dashed(args, params) == [
        "--model-dir", "d", "--top-k=3", "--a_b", "1", "--no_such", "--", "--model_dir"
    ]  # fmt: skip
    assert dashed(["model_dir", "--stages", "2"], params) == ["model_dir", "--stages", "2"]
    assert dashed([Path("--top_k"), 3, "--top_k", 3], params) == [Path("--top_k"), 3, "--top-k", 3]


def test_every_option_is_declared_with_dashes_only():
    names = [
        (path, opt)
        for path, cmd in _commands(typer.main.get_command(app))
        for p in cmd.params
        if p.param_type_name == "option"
        for opt in p.opts + p.secondary_opts
        if opt.startswith("--")
    ]
    assert len(names) > 150  # every command's options were walked (a hand count: 240-odd)
    assert [(path, o) for path, o in names if "_" in o] == []
    assert ("wse train", "--validate-only") in names and ("wse", "--num-processes") in names


def _run(args):
    r = runner.invoke(app, args)
    return r.exit_code, r.output


def test_both_spellings_reach_the_same_option(tmp_path):
    # a leaf command: the same check of the same option, whichever the spelling
    for spelling in ("--max_tokens", "--max-tokens"):
        code, out = _run(["infer", "generate", "--model-dir", str(tmp_path), spelling, "0"])
        assert code == 2 and "--max-tokens must be an integer >= 1, got 0" in out
    code, out = _run(["infer", "generate", "--model_dir", str(tmp_path), "--max_tokens=0"])
    assert code == 2 and "--max-tokens must be an integer >= 1, got 0" in out
    # a group's own option (hpc md) and the root's
    for args in (["hpc", "md", "--num_processes", "0"], ["--num_processes", "0", "wafer", "info"]):
        code, out = _run(args)
        assert code == 2 and "--num-processes must be an integer >= 1, got 0" in out, out
        code2, out2 = _run([a.replace("_", "-") for a in args])
        assert (code2, out2) == (code, out)


def test_an_unknown_underscore_option_is_reported_as_typed():
    code, out = _run(["wafer", "info", "--no_such_option", "1"])
    assert code == 2 and "--no_such_option" in out


def test_help_shows_one_spelling():
    code, out = _run(["infer", "generate", "--help"])
    assert code == 0 and "--model-dir" in out and "--max-tokens" in out
    assert "--model_dir" not in out and "--max_tokens" not in out
