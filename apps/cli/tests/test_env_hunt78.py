"""Hunt 78, environment variables that crashed `wse` commands with a traceback (exit 1)
instead of one line (exit 2): JAX variables outside `jax_env.JAX_OPTIONS` (JAX's ValueError
at `import jax`), XLA_FLAGS other than the device count (XLA's fatal log), and
WSE_LAUNCHER_PID outside a `wse launch` child (the command stopped itself, exit 143).
Oracles: JAX's own definition of each option (`jax._src.config`'s meta: its kind, its enum
values), XLA's refusal in a child that starts JAX's backend, and the same command's output
without the variable.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from wse_cli.testing import NO_JAX_PROBE, WSE, clean_env, one_line_of
from wse_core.host.jax_env import JAX_OPTIONS

pytestmark = pytest.mark.timeout(300)

STENCIL = ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset", "tiny",
           "--steps", "1"]  # fmt: skip
INFO = ["wafer", "info", "-p", "tiny"]
TRUTH = "a truth value (1/0, true/false, yes/no, on/off)"


def _wse(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(WSE + args, env=clean_env(**env), capture_output=True, text=True,
                          timeout=240, check=False)  # fmt: skip


_one_line = one_line_of  # exit 2, one line, its text


def _wanted(name: str) -> str:
    """What JAX's own definition of option `name` takes, in the refusal's words."""
    from jax._src import config as jax_config

    kind, _, extra = jax_config.config.meta[name.lower()]
    if kind == "enum":
        return f"one of {', '.join(extra['enum_values'])}"
    return {bool: TRUTH, int: "an integer", float: "a number"}[kind]


@pytest.mark.parametrize(
    "name",
    [
        "JAX_DEFAULT_MATMUL_PRECISION",
        "JAX_CPU_COLLECTIVES_IMPLEMENTATION",
        "JAX_LOGGING_LEVEL",
        "JAX_COMPILER_DETAILED_LOGGING_MIN_OPS",
        "JAX_RAISE_PERSISTENT_CACHE_ERRORS",
        "JAX_USE_SHARDY_PARTITIONER",
        "JAX_MEMORY_FITTING_LEVEL",
        "JAX_EXEC_TIME_OPTIMIZATION_EFFORT",
    ],
)
def test_jax_variables_outside_the_table_are_one_line(name):
    assert name not in JAX_OPTIONS  # not in the hand table: JAX itself reads it
    line = _one_line(_wse(STENCIL, **{name: "bogus"}))  # was a 70-line traceback, rc 1
    assert line == f"{name} must be {_wanted(name)}, or unset; got 'bogus'"


def test_a_jax_option_jax_checks_itself_is_one_line_with_jaxs_words():
    line = _one_line(_wse(STENCIL, JAX_DEFAULT_DEVICE="x"))  # checked as JAX is imported
    assert line.startswith("JAX_DEFAULT_DEVICE is refused by JAX (jax.default_device must be")
    assert line.endswith("got: 'x'); fix it or unset it")


def test_jax_platform_name_without_its_backend_is_one_line():
    import importlib.util

    if importlib.util.find_spec("libtpu") is not None:
        pytest.skip("libtpu is installed here")
    line = _one_line(_wse(STENCIL, JAX_PLATFORM_NAME="tpu"))  # was a RuntimeError traceback
    assert line.startswith("JAX cannot start JAX_PLATFORM_NAME='tpu' on this machine")


def test_good_values_run_and_no_jax_variables_import_no_jax():
    assert _wse(STENCIL, JAX_DEFAULT_MATMUL_PRECISION="highest").returncode == 0
    probe = subprocess.run([sys.executable, "-c", NO_JAX_PROBE, *INFO], env=clean_env(),
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert probe.returncode == 0 and probe.stderr.strip().endswith("jax imported: False")


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ("--nope", "XLA_FLAGS: unknown flag '--nope'"),
        ("--xla_cpu_use_thunk_runtime=maybe", "XLA_FLAGS: --xla_cpu_use_thunk_runtime must be"),
        ("ab", "XLA_FLAGS starts with 'ab', no --flag"),
    ],
)
def test_bad_xla_flags_are_one_line(flags, says):
    line = _one_line(_wse(STENCIL, XLA_FLAGS=flags))  # was XLA's fatal log, rc 1
    assert line.startswith(says)


def test_xla_flags_xla_takes_run():
    done = _wse(STENCIL, XLA_FLAGS="--xla_cpu_enable_fast_math=false")
    assert done.returncode == 0, done.stderr[-2000:]


def test_launcher_pid_outside_a_launch_child_is_ignored():
    plain = _wse(INFO)
    stray = _wse(INFO, WSE_LAUNCHER_PID="1")  # was SIGTERM, rc 143
    assert (stray.returncode, stray.stdout) == (0, plain.stdout)


# Envreview 78: XLA reads XLA_FLAGS' words up to the first that is no --flag and ignores the
# rest silently; `wse` refused the rest as a flags file (rc 2). And the checks that need JAX
# or XLA ran for every command: `wse wafer info` 0.6 -> 1.8 s with any JAX_* variable.
RECIPE = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"  # jax issue 743
NOTE = ("note: XLA ignores 'intra_op_parallelism_threads=1' in XLA_FLAGS (it reads flags only "
        "up to the first word that is no --flag)")  # fmt: skip


def test_xla_flags_words_xla_ignores_run_with_a_note():
    plain = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"],
                           env=clean_env(XLA_FLAGS=RECIPE), capture_output=True, text=True,
                           timeout=120, check=False)  # fmt: skip
    assert plain.returncode == 0 and "intra_op" not in plain.stderr  # plain JAX: runs, silent
    done = _wse(
        STENCIL, XLA_FLAGS=RECIPE
    )  # was rc 2: "'intra_op_parallelism_threads=1' is no flag"
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [NOTE]


_NO_JAX_NO_HELPER = (
    "import sys\n"
    "sys.addaudithook(lambda e, a: print('helper', file=sys.stderr) if e == 'subprocess.Popen'"
    " else 0)\n" + NO_JAX_PROBE
)


@pytest.mark.parametrize(
    "env",
    [
        {"JAX_DEFAULT_MATMUL_PRECISION": "highest"},
        {"JAX_PLATFORM_NAME": "cpu"},
        {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"},
        {"XLA_FLAGS": RECIPE},
    ],
)
def test_commands_without_jax_import_no_jax_and_start_no_helper_for_jax_variables(env):
    probe = subprocess.run([sys.executable, "-c", _NO_JAX_NO_HELPER, *INFO], env=clean_env(**env),
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stderr.strip().splitlines() == ["jax imported: False"]  # no helper, no note
    assert probe.stdout == _wse(INFO).stdout
