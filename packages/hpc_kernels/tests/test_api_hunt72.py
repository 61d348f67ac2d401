"""Hunt 72 in wse_hpc's Python API (shallow water, CFD, the TLR engine), as a notebook uses it.

Broken before:
- `run_swe(spec, SweConfig(n=8, steps=2.5))`, `steps=True`, `n="8"` and `run_cfd` with
  `steps=2.5` were JAX or Python TypeErrors; `g=inf` ran to a NaN depth; `amplitude=-0.5`
  was refused by a line that did not name it;
- `TlrEngine.time_matvec` timed a complex x that `matvec` refuses for a real operator;
  `report(kernel="x")` replaced the kernel the engine ran.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.fields import FieldError
from wse_hpc.fields.runs import CfdConfig, run_cfd
from wse_hpc.fields.swe import SweConfig, run_swe
from wse_hpc.tlrmvm import TlrError, compress
from wse_hpc.tlrmvm.engine import TlrEngine

SPEC = PRESETS["small"]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"n": 8.5}, "n must be an integer >= 3, got 8.5"),
        ({"n": "8"}, "n must be an integer >= 3, got '8'"),
        ({"n": True}, "n must be an integer >= 3, got True"),
        ({"n": 2}, "n must be an integer >= 3, got 2"),
        ({"steps": 2.5}, "steps must be an integer in 0..2147483647, got 2.5"),
        ({"steps": True}, "steps must be an integer in 0..2147483647, got True"),
        ({"steps": -1}, "steps must be an integer in 0..2147483647, got -1"),
        ({"g": float("inf")}, "g must be a positive finite number, got inf"),
        ({"g": float("nan")}, "g must be a positive finite number, got nan"),
        ({"g": 0.0}, "g must be a positive finite number, got 0.0"),
        ({"cfl": 0.7}, "cfl must be a number in (0, 0.6] (RK3's limit on the C grid), got 0.7"),
        (
            {"amplitude": -0.5},
            "amplitude must be a number in [0, 1) (the hump over depth 1), got -0.5",
        ),  # fmt: skip
        (
            {"amplitude": float("nan")},
            "amplitude must be a number in [0, 1) (the hump over depth 1), got nan",
        ),  # fmt: skip
        ({"translate_domain": "yes"}, "translate_domain must be True or False, got 'yes'"),
    ],
)
def test_a_bad_swe_setting_is_one_line_naming_it(kw, message):
    cfg = {"n": 8, "steps": 2, **kw}
    with pytest.raises(FieldError, match=f"^{re.escape(message)}$"):
        run_swe(SPEC, SweConfig(**cfg))


def test_numpy_integers_still_run_swe():
    run = run_swe(SPEC, SweConfig(n=np.int64(8), steps=np.int32(2)))
    assert run.steps == 2 and run.h.shape == (8, 8) and np.isfinite(run.h).all()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"steps": 2.5}, "steps must be an integer in 0..2147483647, got 2.5"),
        ({"steps": True}, "steps must be an integer in 0..2147483647, got True"),
        ({"output_every": 1.5}, "output_every must be an integer in 0..2147483647, got 1.5"),
        ({"output_every": -1}, "output_every must be an integer in 0..2147483647, got -1"),
        ({"re": float("inf")}, "re must be a finite number in [0.001, 1e+09] (as --re), got inf"),
        ({"ra": float("nan")}, "ra must be a finite number in [1, 1e+17] (as --ra), got nan"),
        ({"aspect": "2"}, "aspect must be a finite number in [0.001, 1000] (as --aspect), got '2'"),
        (
            {"dt": float("nan")},
            "dt must be a finite number >= 1e-09 (None: the case's default), got nan",
        ),  # fmt: skip
        (
            {"dt": -1e-3},
            "dt must be a finite number >= 1e-09 (None: the case's default), got -0.001",
        ),  # fmt: skip
        ({"restart": "no"}, "restart must be True or False, got 'no'"),
    ],
)
def test_a_bad_cfd_setting_is_one_line_naming_it(kw, message):
    cfg = CfdConfig(case="cavity", grid=(8, 8, 1), spec=PRESETS["tiny"], **{"steps": 2, **kw})
    with pytest.raises(FieldError, match=f"^{re.escape(message)}$"):
        run_cfd(cfg)


# -- the TLR engine -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_engine():
    n = 64
    s = np.linspace(0, 1, n)
    a = 1 / (1 + 10 * np.abs(s[:, None] - s[None, :]))
    return TlrEngine.build(compress(a, nb=16, threshold=1e-4, rule="tile"), SPEC)


def test_time_matvec_refuses_what_matvec_refuses(real_engine):
    x = np.random.default_rng(0).standard_normal(64)
    message = "x is complex but the operator is real; pass a real vector"
    with pytest.raises(TlrError, match=f"^{re.escape(message)}$"):
        real_engine.matvec(x + 1j)
    with pytest.raises(TlrError, match=f"^{re.escape(message)}$"):
        real_engine.time_matvec(x + 1j, repeats=1)
    assert real_engine.time_matvec(x, repeats=1) > 0


def test_time_matvec_times_a_complex_x_on_a_complex_operator():
    """The other half of the rule: a complex operator takes complex x in both."""
    n = 32
    s = np.linspace(0, 1, n)
    a = np.exp(1j * s[:, None] * s[None, :]) / (1 + np.abs(s[:, None] - s[None, :]))
    eng = TlrEngine.build(compress(a, nb=16, threshold=1e-4, rule="tile"), SPEC)
    x = np.random.default_rng(1).standard_normal(n) * (1 + 1j)
    got = eng.matvec(x)
    assert np.abs(got - a @ x).max() / np.abs(a @ x).max() < 1e-3  # threshold 1e-4 on sums
    assert eng.time_matvec(x, repeats=1) > 0


def test_report_extra_may_not_replace_the_report_s_own_figures(real_engine):
    own = real_engine.report().extra
    for key in ("kernel", "operator", "plan"):
        with pytest.raises(TlrError, match=f"^report\\(\\): '{key}' would replace"):
            real_engine.report(**{key: "x"})
    rep = real_engine.report(measured_wall_s=1e-3, run_id=7)
    assert rep.extra["run_id"] == 7 and rep.extra["kernel"] == own["kernel"] == real_engine.kernel
    assert rep.extra["operator"] == own["operator"] and rep.measured_wall_s == 1e-3
    assert list(rep.extra)[-1] == "run_id"  # the caller's figures after the report's own
