"""Hunt 79, environment values that ended `wse` in XLA's or JAX's own log (exit 1, or exit 0
with C++ error lines and nothing dumped) instead of one line (exit 2). Oracle: the same
command without the variable runs (exit 0), and the line names what the variable holds.
"""

from __future__ import annotations

import subprocess

import pytest
from wse_cli.testing import WSE, clean_env, one_line_of

pytestmark = pytest.mark.timeout(300)

STENCIL = ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset", "tiny",
           "--steps", "1"]  # fmt: skip


def _wse(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(WSE + STENCIL, env=clean_env(**env), capture_output=True, text=True,
                          timeout=240, check=False)  # fmt: skip


_one_line = one_line_of  # exit 2, one line, its text


def test_the_command_runs_without_the_variables():
    assert _wse().returncode == 0


@pytest.mark.parametrize(
    "flags",
    ["--xla_llvm_disable_expensive_passes=maybe",
     "--xla_force_host_platform_device_count=2 --xla_llvm_disable_expensive_passes=nah"],
)  # fmt: skip
def test_a_bad_value_of_the_stacks_own_xla_flag_is_one_line(flags):
    line = _one_line(_wse(XLA_FLAGS=flags))  # was XLA's 94-line fatal log, rc 1
    assert line.startswith("XLA_FLAGS: --xla_llvm_disable_expensive_passes must be true or false")


def test_a_leading_vertical_tab_is_named():
    line = _one_line(_wse(XLA_FLAGS="\v--xla_dump_to=/tmp/x"))
    assert line.startswith("XLA_FLAGS starts with '\\x0b', a space XLA does not skip"), line


def test_a_dump_folder_xla_cannot_make_is_one_line(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for bad in (str(afile), "/proc/nope/x"):
        line = _one_line(_wse(XLA_FLAGS=f"--xla_dump_to={bad}"))  # was rc 0, 16 C++ lines
        assert line.startswith(f"XLA_FLAGS: --xla_dump_to={bad} is no folder XLA can make"), line


@pytest.mark.parametrize("kind", ["gpu", "tpu"])
def test_a_default_device_jax_will_not_start_is_one_line(kind):
    line = _one_line(_wse(JAX_DEFAULT_DEVICE=kind))  # was a 93-line traceback, rc 1
    assert line.startswith(f"JAX_DEFAULT_DEVICE='{kind}' names a backend JAX will not start")
    assert "starts cpu" in line


def test_an_unknown_backend_at_run_time_is_one_line(monkeypatch):
    from wse_cli.errors import _no_backend  # where a GPU plugin is installed without a GPU

    monkeypatch.setenv("JAX_DEFAULT_DEVICE", "gpu")
    said = ("Unknown backend: 'gpu' requested, but no platforms that are instances of gpu are "
            "present. Platforms present are: cpu")  # fmt: skip
    assert _no_backend(RuntimeError(said)) == (
        f"JAX_DEFAULT_DEVICE='gpu' names a backend JAX did not start: {said}; set "
        "JAX_DEFAULT_DEVICE=cpu or unset it"
    )
