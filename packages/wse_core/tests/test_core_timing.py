"""wse_core.host.runtime's one timing helper, on a fake clock: every number is counted by hand.

The clock advances only inside `fn` (by the call's listed duration), so `wall_s` must see
exactly that duration, warm-up calls must not be timed, and the median is of the timed
calls only. A JAX result comes back ready; importing wse_core does not import JAX.
"""

import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import WseError
from wse_core.host import runtime


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(runtime.time, "perf_counter", lambda: now[0])
    return now


def _calls(clock, durations):
    queue = list(durations)

    def fn(x):
        clock[0] += queue.pop(0)
        return x * 2

    return fn, queue


def test_wall_s_times_one_call_and_returns_its_result(clock):
    fn, _ = _calls(clock, [0.25])
    out, wall = runtime.wall_s(fn, 3)
    assert (out, wall) == (6, 0.25)


def test_warmup_is_untimed_and_the_median_is_of_the_timed_calls(clock):
    # warm-up 9.0 (a compile) then 1, 4, 2: median 2.
    fn, left = _calls(clock, [9.0, 1.0, 4.0, 2.0])
    assert runtime.wall_times_s(fn, 1, repeats=3, warmup=1) == [1.0, 4.0, 2.0]
    assert not left
    fn, _ = _calls(clock, [9.0, 1.0, 4.0, 2.0])
    assert runtime.median_wall_s(fn, 1, repeats=3) == 2.0
    fn, _ = _calls(clock, [3.0, 5.0])
    assert runtime.median_wall_s(fn, 1, repeats=2, warmup=0) == 4.0


def test_refuses_no_repeats():
    with pytest.raises(WseError, match="repeats >= 1"):
        runtime.median_wall_s(lambda: None, repeats=0)


def test_jax_and_numpy_results_come_back_whole():
    out, wall = runtime.wall_s(lambda a: {"y": a + 1}, jnp.arange(3))
    assert wall > 0
    np.testing.assert_array_equal(out["y"], [1, 2, 3])
    out, _ = runtime.wall_s(np.add, np.ones(2), 1)
    np.testing.assert_array_equal(out, [2, 2])


def test_wse_core_imports_no_jax():
    probe = "import sys, wse_core, wse_core.host.runtime; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
