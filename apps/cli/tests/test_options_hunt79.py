"""Hunt 79 (new78 #8, hostile79 #4): a numeric option's out-of-range value is echoed as typed.

Stop 78 kept the typed text for non-finite values only; a finite one came back as Python
renders the parsed number (`--defect-rate 1e5` as "got 100000.0", `--mfu 1e-400` as "got
0.0", `--port 1e5` as "got 100000"). Oracle: the text on the command line itself; and the
value a command receives is still a plain float or int (its type, its value by float()/int()).
"""

from __future__ import annotations

import subprocess

import pytest
import typer
from wse_cli.app import app
from wse_cli.options import NUMBER_MARK
from wse_cli.testing import WSE, clean_env, walk_commands

pytestmark = pytest.mark.timeout(300)

ROOT = typer.main.get_command(app)


@pytest.mark.parametrize(
    ("args", "typed"),
    [
        (["wafer", "defects", "-p", "tiny", "--defect-rate", "1e5"], "1e5"),
        (["plan", "infer", "-m", "llama3-8b", "--min-user-tokens-per-s", "1e300"], "1e300"),
        (["plan", "train", "-m", "gpt2-124m", "--tokens", "1e9", "--mfu", "1e-400"], "1e-400"),
        (["plan", "train", "-m", "gpt2-124m", "--tokens", "1e9", "--mfu", "-1"], "-1"),
        (["plan", "train", "-m", "tiny", "--tokens", "-1e3"], "-1e3"),
        (["infer", "bench", "--url", "http://127.0.0.1:9", "-n", "2", "--request-rate=1e-400"],
         "1e-400"),
        (["infer", "serve", "--model-dir", "mock", "--port", "1e5"], "1e5"),
    ],
)  # fmt: skip
def test_an_out_of_range_number_is_echoed_as_typed(args, typed):
    done = subprocess.run(WSE + args, env=clean_env(), capture_output=True, text=True,
                          timeout=240, check=False)  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr[-2000:])
    assert lines[0].startswith("Error: ") and lines[0].endswith(f", got {typed}"), lines


def test_every_numeric_option_hands_its_command_a_plain_number():
    class Ctx:  # what the callback asks of click's context: where the value came from
        def get_parameter_source(self, name):
            return None

    checked = 0
    for _, cmd in walk_commands(ROOT):
        for p in cmd.params:
            spec = getattr(p.callback, NUMBER_MARK, None)
            if spec is None or p.nargs != 1:
                continue
            parse = p.type_descriptor.parameter_info.parser
            text = "1" if spec.kind is int else "0.5"
            x = parse(text)
            try:
                got = p.callback(Ctx(), p, x)
            except Exception:  # noqa: BLE001 (out of this option's range: the refusal's test)
                continue
            assert type(got) is spec.kind and got == spec.kind(text), (p.opts, got)
            checked += 1
    assert checked > 40
