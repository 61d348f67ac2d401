"""Hunt 79 on the environment JAX and XLA read (`wse_core.host.jax_env`, `xla_flags`).

- A bad value of a flag the stack sets itself (`--xla_llvm_disable_expensive_passes=maybe`)
  skipped the check (`ask_xla` asks XLA of no own flag) and ended the run in XLA's 94-line
  fatal log. Oracle: XLA's own parse of the same XLA_FLAGS in a child process.
- A value starting with a space XLA does not skip (a vertical tab) named the valid flag
  after it "no flag". Oracle: XLA's scan skips only ' \\t\\r\\n' (it reads a flags file).
- `--xla_dump_to` naming a file, or a folder under one or under /proc, ran with two C++
  error lines per program and dumped nothing. Oracle: `os.makedirs` of the same path.
- `JAX_DEFAULT_DEVICE=gpu` (or tpu) where JAX starts no such backend passed JAX's import and
  failed at its first device use (a 93-line traceback). Oracle: JAX in a child process,
  asked for that backend's devices.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from wse_core.errors import WseError
from wse_core.host import jax_env

pytestmark = pytest.mark.timeout(300)

OWN_BOOL = "xla_llvm_disable_expensive_passes"
_PARSE = "import jaxlib._jax as j; j.CompileOptions()"  # XLA parses XLA_FLAGS, nothing else


def _child(code: str, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "WSE_"))}
    return subprocess.run([sys.executable, "-c", code], env={**env, **extra},
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


@pytest.mark.parametrize(
    "value", ["maybe", "", "yes", "2", "t", "true", "TRUE", "False", "1", "0", None]
)
def test_the_stacks_own_bool_flag_is_refused_exactly_where_xla_refuses_it(value):
    word = f"--{OWN_BOOL}" if value is None else f"--{OWN_BOOL}={value}"
    for flags in (word, f"--xla_force_host_platform_device_count=2 {word}"):
        xla_ok = _child(_PARSE, XLA_FLAGS=flags).returncode == 0
        try:
            jax_env.check({"XLA_FLAGS": flags})
            ours_ok = True
        except WseError as e:
            ours_ok = False
            assert str(e) == (
                f"XLA_FLAGS: --{OWN_BOOL} must be true or false (1/0, any case; the bare flag is "
                f"true); got {value!r}; fix it, or unset XLA_FLAGS"
            )
        assert ours_ok == xla_ok, (flags, xla_ok)


@pytest.mark.parametrize("first", ["\v", "\f", "\x1c", "\u00a0"])
def test_a_leading_space_xla_does_not_skip_is_named_not_the_flag_after_it(first):
    flags = f"{first}--xla_dump_to=/tmp/x"
    assert first.isspace() and first not in " \t\r\n"  # Python strips it, XLA does not
    with pytest.raises(WseError) as e:
        jax_env.check({"XLA_FLAGS": flags})
    line = str(e.value)
    assert line.startswith(f"XLA_FLAGS starts with {first!r}, a space XLA does not skip"), line
    assert "is no flag" not in line and "'--xla_dump_to" not in line


def test_a_dump_folder_xla_cannot_make_is_refused_and_one_it_can_passes(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for bad in (afile, afile / "sub" / "x", "/proc/nope/x"):
        with pytest.raises(OSError):
            os.makedirs(bad)  # the oracle: no folder can be made there
        with pytest.raises(WseError) as e:
            jax_env.check({"XLA_FLAGS": f"--xla_dump_to={bad}"})
        assert str(e.value).startswith(f"XLA_FLAGS: --xla_dump_to={bad} is no folder XLA can")
    good = tmp_path / "new" / "dump"
    jax_env.check({"XLA_FLAGS": f"--xla_dump_to={afile} --xla_dump_to={good}"})  # the last wins
    assert not good.exists() and sorted(os.listdir(tmp_path)) == ["afile"]  # nothing left
    os.makedirs(good)  # the oracle: it can be made
    jax_env.check({"XLA_FLAGS": f"--xla_dump_to={good}"})
    assert os.listdir(good) == []
    jax_env.check({"XLA_FLAGS": "--xla_dump_to=-"})  # stdout, XLA's own word


def _has_backend(kind: str, **env: str) -> bool:
    code = f"import jax; jax.devices({kind!r})"
    return _child(code, **env).returncode == 0


@pytest.mark.parametrize("kind", ["gpu", "tpu"])
def test_a_default_device_jax_will_not_start_is_refused_naming_what_it_will(kind):
    assert not _has_backend(kind, JAX_PLATFORMS="cpu")  # the oracle: JAX has none
    with pytest.raises(WseError) as e:
        jax_env.check({"JAX_PLATFORMS": "cpu", "JAX_DEFAULT_DEVICE": kind})
    assert str(e.value) == (
        f"JAX_DEFAULT_DEVICE={kind!r} names a backend JAX will not start here (JAX_PLATFORMS="
        "'cpu' starts cpu); set JAX_DEFAULT_DEVICE to one of those or unset it"
    )
    jax_env.check({"JAX_PLATFORMS": "cpu", "JAX_DEFAULT_DEVICE": "cpu"})
    if _has_backend(kind):
        jax_env.check({"JAX_DEFAULT_DEVICE": kind})
    else:
        with pytest.raises(WseError, match="this machine has cpu"):
            jax_env.check({"JAX_DEFAULT_DEVICE": kind})
