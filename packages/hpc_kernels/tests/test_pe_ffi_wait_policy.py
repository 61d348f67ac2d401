"""Importing `wse_core.host.pe_ffi` makes the PE kernels' OpenMP threads sleep when idle
(`OMP_WAIT_POLICY=passive`); TLR-MVM's kernels ask for a bounded spin (`active`,
`GOMP_SPINCOUNT=10000000`); the user's own setting of either variable always wins."""

import os
import subprocess
import sys

import pytest

MODULES = {"pe_ffi": "wse_core.host.pe_ffi", "tlr": "wse_hpc.tlrmvm.pe_kernels"}


@pytest.mark.parametrize(
    ("module", "given", "expected"),
    [
        ("pe_ffi", {}, ("passive", "-")),
        ("tlr", {}, ("active", "10000000")),
        ("tlr", {"OMP_WAIT_POLICY": "passive"}, ("passive", "-")),
        ("tlr", {"GOMP_SPINCOUNT": "500"}, ("-", "500")),
        ("pe_ffi", {"OMP_WAIT_POLICY": "active"}, ("active", "-")),
    ],
)
def test_wait_policy_default_respects_the_environment(module, given, expected):
    keys = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    env = {k: v for k, v in os.environ.items() if k not in keys} | given
    code = (
        f"import os, {MODULES[module]}\n"
        "print(*(os.environ.get(k, '-') for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert tuple(out.stdout.split()) == expected


def test_an_unknown_policy_is_refused():
    from wse_core.host.pe_ffi import wait_policy

    with pytest.raises(ValueError, match="known: sleep, spin"):
        wait_policy("busy")
