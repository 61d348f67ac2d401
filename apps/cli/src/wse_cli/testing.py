"""Test support for running the installed `wse` as subprocesses, alone or under `wse launch`.

These runs emulate several hosts on one machine with virtual CPU devices (`WSE_DEVICES`,
`--devices-per-proc`), so every child runs on the CPU (`JAX_PLATFORMS=cpu`), the default
backend or not: on a one-GPU host each process would otherwise take the same GPU (NCCL
refuses it: "Duplicate GPU detected") and `WSE_DEVICES=8` would give one device, not 8."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["WSE", "clean_env", "run_json", "launch_json"]

WSE = [sys.executable, "-m", "wse_cli"]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without WSE_* and XLA settings, on the CPU, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WSE_", "XLA_FLAGS"))}
    env["JAX_PLATFORMS"] = "cpu"
    env.update(extra)
    return env


def _last_json(text: str) -> dict:
    # Gloo's C++ logger writes connection lines to stdout; the command's JSON comes last.
    return json.loads(text[text.index("\n{") + 1 if not text.startswith("{") else 0 :])


def run_json(args: Sequence[str], *, devices: int = 8, timeout_s: float = 300) -> dict:
    """`wse ARGS` in one process with `devices` virtual devices; its JSON output."""
    done = subprocess.run(
        WSE + list(args),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=clean_env(WSE_DEVICES=str(devices)),
    )
    if done.returncode != 0:
        raise AssertionError(f"wse {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return _last_json(done.stdout)


def launch_json(
    args: Sequence[str], *, nproc: int = 2, devices_per_proc: int = 4, timeout_s: float = 300
) -> dict:
    """`wse launch --nproc N -- ARGS`; the JSON that process 0 prints."""
    cmd = WSE + [
        "launch",
        "--nproc",
        str(nproc),
        "--devices-per-proc",
        str(devices_per_proc),
        "--",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=clean_env())
    if done.returncode != 0:
        raise AssertionError(f"wse launch {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return _last_json(done.stdout)
