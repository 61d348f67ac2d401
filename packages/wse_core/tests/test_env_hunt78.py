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


@pytest.mark.parametrize("flags", ["-xla_dump_to=x", "--", "--xla_dump_to=/tmp/x -x junk"])
def test_words_xla_reads_that_are_no_flags_are_refused_without_asking_xla(flags, monkeypatch):
    assert _xla_verdict(flags).returncode != 0  # XLA: "Unknown flag in XLA_FLAGS"

    def no_probe(*args, **kwargs):
        raise AssertionError("XLA asked")

    monkeypatch.setattr(subprocess, "run", no_probe)
    with pytest.raises(WseError) as e:
        jax_env.check({"XLA_FLAGS": flags})
    assert str(e.value).startswith("XLA_FLAGS: '-") and "is no flag; give each as" in str(e.value)


@pytest.mark.parametrize("flags", ["ab", "  ab --xla_cpu_enable_fast_math=false", "/no/such/file"])
def test_a_first_word_that_is_no_flag_is_a_flags_file_to_xla_and_refused(flags, monkeypatch):
    """XLA reads the whole value as a file's name (its first non-blank character is no -);
    the stack's own flag would be glued onto that name, so it is refused, at once."""
    verdict = _xla_verdict(f"{flags} --xla_llvm_disable_expensive_passes=true")
    assert verdict.returncode != 0 and "Could not open file" in verdict.stderr
    monkeypatch.setattr(subprocess, "run", None)  # XLA is not asked
    with pytest.raises(WseError) as e:
        jax_env.check({"XLA_FLAGS": flags})
    first = flags.split()[0]
    assert str(e.value).startswith(f"XLA_FLAGS starts with '{first}', no --flag, and XLA reads")
    assert "as the name of a flags file, which wse does not take" in str(e.value)


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


# Envreview 78: XLA reads XLA_FLAGS' words up to the first that is no --flag and ignores the
# rest, silently (xla/parse_flags_from_env.cc, ParseArgvFromString). A later bare word
# (`intra_op_parallelism_threads=1`, a recipe from JAX's issues) was refused as a flags file.
RECIPE = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
_PARSE = "import jaxlib._jax as j; j.CompileOptions()"  # XLA parses XLA_FLAGS, nothing else


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "WSE_"))}
    return {**env, "JAX_PLATFORMS": "cpu", **extra}


def _xla_parses(flags: str) -> bool:
    done = subprocess.run([sys.executable, "-c", _PARSE], env=_env(XLA_FLAGS=flags),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    return done.returncode == 0


@pytest.mark.parametrize(
    ("flags", "read"),
    [
        (RECIPE, 1),
        ("--xla_cpu_enable_fast_math=false bare --xla_cpu_multi_thread_eigen=false", 1),
        ("--xla_dump_to='/tmp/a b' tail", 1),
        ('--xla_dump_to="/tmp/a \\"b" --xla_cpu_enable_fast_math=false', 2),
        ("\t--xla_cpu_enable_fast_math=false  --xla_cpu_multi_thread_eigen=false", 2),
    ],
)
def test_split_reads_the_words_xla_reads_and_ignores_the_rest(flags, read):
    words, rest = xla_flags.split(flags)
    assert len(words) == read
    assert _xla_parses(flags)
    for word in words:  # a word XLA reads: an unknown flag in its place is refused
        assert not _xla_parses(flags.replace(word, "--nope", 1)), word
    if rest:  # XLA ignores the rest: an unknown flag after it passes
        assert _xla_parses(f"{flags} --nope")
    else:
        assert not _xla_parses(f"{flags} --nope")


@pytest.mark.parametrize(
    "flags",
    [
        '--xla_force_host_platform_device_count="3"',
        "--xla_cpu_enable_fast_math=false bare --xla_force_host_platform_device_count=3",
    ],
)
def test_the_device_count_is_the_one_xla_reads(flags):
    done = subprocess.run([sys.executable, "-c", "import jax; print(jax.device_count())"],
                          env=_env(XLA_FLAGS=flags), capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    xla_count = int(done.stdout.split()[-1])  # JAX's CPU devices as XLA's flag gave them
    assert (jax_env.xla_device_count({"XLA_FLAGS": flags}) or 1) == xla_count


_CONFIGURED = """import os, sys
from wse_core.host import runtime
runtime.configure(1, compile_cache=False)
import jax
jax.devices()
print(os.environ["XLA_FLAGS"])
"""


def test_words_xla_ignores_run_with_one_note_and_the_stacks_flag_is_read():
    plain = _xla_verdict(RECIPE)
    assert plain.returncode == 0 and "intra_op" not in plain.stderr  # XLA says nothing
    jax_env.check({"XLA_FLAGS": RECIPE})  # passes, as in XLA
    done = subprocess.run([sys.executable, "-c", _CONFIGURED], env=_env(XLA_FLAGS=RECIPE),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "note: XLA ignores 'intra_op_parallelism_threads=1' in XLA_FLAGS (it reads flags only "
        "up to the first word that is no --flag)"
    ]
    configured = done.stdout.strip().splitlines()[-1]
    assert _xla_parses(configured)
    own = "--xla_llvm_disable_expensive_passes=true"  # runtime's: where XLA reads it
    assert not _xla_parses(configured.replace(own, "--nope"))


_LAZY = """import sys
popens = []
sys.addaudithook(lambda event, args: popens.append(args) if event == "subprocess.Popen" else 0)
from wse_core.host import runtime
runtime.configure(1, compile_cache=False)
print("jax" in sys.modules, len(popens))
try:
    import jax
except Exception as e:
    print(type(e).__name__, "|", e)
"""


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"XLA_FLAGS": "--nope"}, "XLA_FLAGS: unknown flag '--nope'"),
        ({"JAX_DEFAULT_MATMUL_PRECISION": "bogus"}, "JAX_DEFAULT_MATMUL_PRECISION must be one of"),
        ({"JAX_DEFAULT_MATMUL_PRECISION": "highest", "JAX_PLATFORM_NAME": "cpu"}, None),
    ],
)
def test_checks_that_need_jax_or_xla_wait_for_jaxs_import(env, line):
    """`configure` imports no JAX and starts no helper; JAX's first import makes the checks."""
    done = subprocess.run([sys.executable, "-c", _LAZY], env=_env(**env), capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout.strip().splitlines()
    assert said[0] == "False 0"  # no JAX, no helper process at configure
    if line is None:
        assert said[1:] == []
    else:
        assert said[1].startswith(f"WseError | {line}")
