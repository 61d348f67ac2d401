"""Hunt 78: `wse infer bench --request-rate 1e400` was refused ("must be inf (all at once) or a
finite number ..., got inf"): the rate matched inf by its spelling only. vLLM's
`--request-rate` is `float(...)`, and float("1e400") is inf: every request at once.

Oracles: Python's float(), which vLLM's argparse applies (a value is all at once exactly when
float() of it is +inf), and a run against the mock server saved and read back (vLLM writes
`request_rate: "inf"` for all at once).
"""

from __future__ import annotations

import json
import math

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(60)
ROOT = typer.main.get_command(app)
ENV = {"OPENAI_API_KEY": None, "COLUMNS": "200"}
DEAD = ["infer", "bench", "--url", "http://127.0.0.1:9"]  # nothing listens: refusals come first


@pytest.mark.parametrize(
    "rate", ["1e400", "+1E400", "1e309", " INF ", "Infinity", pytest.param("9" * 400, id="9x400")]
)
def test_a_rate_float_reads_as_inf_runs_all_at_once(tmp_path, rate):
    assert math.isinf(float(rate)) and float(rate) > 0  # vLLM's reading of it
    out = tmp_path / "b.json"
    with running_server(max_slots=4, step_delay_s=0.001) as server:
        args = ["-n", "4", "-c", "4", "--max-tokens", "3", "--out", str(out)]
        code, text = invoke(ROOT, ["infer", "bench", "--url", server.http_url,
                                   "--request-rate", rate, *args], ENV)  # fmt: skip
    assert code == 0, text
    d = json.loads(out.read_text())
    assert d["request_rate"] == "inf" and d["completed"] == 4  # as --request-rate inf
    assert "inf (all at once)" in text


@pytest.mark.parametrize(
    ("rate", "got"),
    [("-1e400", "-1e400"), ("-inf", "-inf"), ("nan", "nan"), ("-nan", "-nan"), ("0", "0")],
)
def test_minus_inf_nan_and_zero_are_still_refused(rate, got):
    assert not (float(rate) > 0 and math.isinf(float(rate)))  # not all at once for vLLM either
    refused_in_one_line(ROOT, [*DEAD, "--request-rate", rate],
                        "--request-rate must be inf (all at once) or a finite number in "
                        f"(0, 1000000.0] (requests/s), got {got}")  # fmt: skip


def test_a_finite_rate_past_the_top_is_still_refused():
    refused_in_one_line(ROOT, [*DEAD, "--request-rate", "1e300"],
                        "--request-rate must be inf (all at once) or a finite number in "
                        "(0, 1000000.0] (requests/s), got 1e300")  # fmt: skip
