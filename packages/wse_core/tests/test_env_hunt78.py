"""Hunt 78 on the environment JAX and XLA read (`wse_core.host.jax_env`, `xla_flags`):
XLA_FLAGS' words and flags were left to XLA, whose fatal log ended the run (an unknown flag,
a bad value with its 94-line flag list, a bare word read as a flags file with the stack's own
flag glued on). The oracle is XLA itself: JAX's backend started in a child process with the
same XLA_FLAGS.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from wse_core.errors import WseError
from wse_core.host import jax_env, xla_flags

pytestmark = pytest.mark.timeout(120)

_START = "import jax; jax.devices()"  # XLA reads XLA_FLAGS as its CPU backend starts


def _xla_verdict(flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", _START], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "xla_says", "line"),
    [
        ("--nope", "Unknown flag in XLA_FLAGS: --nope",
         "XLA_FLAGS: unknown flag '--nope'; give flags XLA knows, or unset XLA_FLAGS"),
        ("--xla_cpu_use_thunk_runtime=maybe", "Couldn't interpret value maybe",
         "XLA_FLAGS: --xla_cpu_use_thunk_runtime must be a bool (default true); got 'maybe'; "
         "fix it, or unset XLA_FLAGS"),
    ],
)  # fmt: skip
def test_flags_xla_refuses_are_one_line(flags, xla_says, line):
    verdict = _xla_verdict(flags)
    assert verdict.returncode != 0 and xla_says in verdict.stderr  # XLA's own refusal
    with pytest.raises(WseError) as e:
        jax_env.check({"XLA_FLAGS": flags})
    assert str(e.value) == line


@pytest.mark.parametrize("flags", ["ab", "--xla_dump_to=/tmp/x junk", "-xla_dump_to=x", "--"])
def test_words_that_are_no_flags_are_refused_without_asking_xla(flags, monkeypatch):
    def no_probe(*args, **kwargs):
        raise AssertionError("XLA asked")

    monkeypatch.setattr(subprocess, "run", no_probe)
    with pytest.raises(WseError) as e:
        jax_env.check({"XLA_FLAGS": flags})
    assert str(e.value).startswith("XLA_FLAGS: ") and "is no flag; give each as" in str(e.value)


def test_a_bare_word_is_a_flags_file_to_xla():
    """Why a bare word is refused: XLA reads the whole value as a file's name."""
    verdict = _xla_verdict("ab --xla_llvm_disable_expensive_passes=true")
    assert verdict.returncode != 0 and "Could not open file" in verdict.stderr


def test_flags_xla_takes_pass_and_quoted_values_stay_one_word():
    good = '--xla_cpu_enable_fast_math=false --xla_dump_to="/tmp/a b"'
    assert _xla_verdict("--xla_cpu_enable_fast_math=false").returncode == 0
    assert xla_flags.words(good) == ["--xla_cpu_enable_fast_math=false", '--xla_dump_to="/tmp/a b"']
    jax_env.check({"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"})


def test_no_xla_flags_or_only_the_stacks_own_cost_nothing(monkeypatch):
    def no_probe(*args, **kwargs):
        raise AssertionError("XLA asked")

    monkeypatch.setattr(subprocess, "run", no_probe)
    own = "--xla_force_host_platform_device_count=4 --xla_llvm_disable_expensive_passes=true"
    for env in ({}, {"XLA_FLAGS": own}, {"XLA_FLAGS": ""}):
        start = time.perf_counter()
        for _ in range(100):
            jax_env.check(env)
        assert (time.perf_counter() - start) / 100 < 1e-3  # measured ~10 us a call


def test_jax_platform_name_without_its_backend_is_one_line():
    import importlib.util

    if importlib.util.find_spec("libtpu") is not None:
        pytest.skip("libtpu is installed here")
    with pytest.raises(WseError) as e:
        jax_env.check({"JAX_PLATFORM_NAME": "tpu"})
    assert str(e.value).startswith("JAX cannot start JAX_PLATFORM_NAME='tpu' on this machine")
    jax_env.check({"JAX_PLATFORM_NAME": "CPU"})  # JAX lowercases it
