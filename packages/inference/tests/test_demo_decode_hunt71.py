"""Hunt 71 (`jobs6`): `wse demo`'s batch-1 decode line. Broken before: the 8B check was priced
on the published setup (1,500 cached tokens, the token's trip to the host) and the 70B beside
it on `predict_model`'s defaults (4,096 cached tokens, no trip), named nowhere on the line:
694 tokens/s, where the `hotchips24-inference` experiment prints 740.7 for the same case.

Oracle: the experiment's own 70B row (`hotchips24_inference._predictions`).
"""

from __future__ import annotations

import pytest
from wse_core import preset
from wse_inference.demo.generation import decode_70b, decode_line
from wse_inference.pipeline.perf import tokens_per_s
from wse_inference.studies import hotchips24_inference as hc


def _experiment_70b() -> float:
    rows, _ = hc._predictions()
    (row,) = [r for r in rows if r.params["model"] == "llama3.1-70b"]
    return row.value


def test_the_demos_70b_is_the_experiments_row():
    report, plan, setup = decode_70b(preset("wse3"))
    row = _experiment_70b()
    assert tokens_per_s(report) == pytest.approx(row, rel=1e-12)  # before: 694 against 740.7
    # 740.7 before hunt 76's hop rule; 740 before hunt decode41 priced the planner's plan;
    # 913.54 before hunt 82 jobs18's whole wavelets (913.10); 584.62 since session 84's
    # CS-3 hop and relay latencies fitted on WaferLLM's MeshGEMV measured on a CS-3; 692.31
    # since issue 41 fitted CS-3's DSD issue and control instruction on the same rows;
    # 685.89 since session 86 counted the SDK gemv's control (15 instructions a product);
    # 673.54 with the decode's norms, argmax, softmax reductions and RoPE priced, session 86
    assert plan.num_wafers == 4 and round(row) == 674
    assert setup == ("8,192-token context, 1,500 cached tokens read per token, the token's "
                     "trip to the host, sdk GEMVs, 16-bit weights")  # fmt: skip


def test_the_line_names_the_setup_both_figures_stand_on():
    line = decode_line(preset("wse3"))
    _, _, setup = decode_70b(preset("wse3"))
    assert line.startswith(f"predicted batch-1 decode on the published setup ({setup}): ")
    assert f"70B on 4 WSE-3s {_experiment_70b():,.0f} tokens/s (as hotchips24-inference)" in line
