"""Importing `wse_hpc.pe_ffi` makes the PE kernels' OpenMP threads sleep when idle
(`OMP_WAIT_POLICY=passive`) unless the user's environment already chose a policy."""

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize(("given", "expected"), [(None, "passive"), ("active", "active")])
def test_wait_policy_default_respects_the_environment(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    code = "import os, wse_hpc.pe_ffi; print(os.environ['OMP_WAIT_POLICY'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected
