"""Test support shared by every package: NumPy oracles of the fabric ops and mesh shapes,
`mutate`, the corruptions the parsers' fuzz tests apply to valid files, and `tiny_trace`, a
small per-PE trace with dead PEs for the trace file's tests. (`ROUND_DECODER`, a decoder
shape whose GPU roofline is easy on paper, is `wse_systems.testing`'s.)

The oracles are plain-NumPy statements of what each fabric op means on the logical grid,
written independently of `wse_core.fabric`, so a test compares the sharded result with them.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "MESH_SHAPES",
    "MUTATIONS",
    "np_shift",
    "np_multicast",
    "available_meshes",
    "mutate",
    "one_line_error",
    "refused_without_jax",
    "tiny_trace",
]

# Mesh shapes the tests exercise with 8 virtual CPU devices.
MESH_SHAPES = ((1, 1), (2, 4), (4, 2))

_AXIS_SIGN = {"N": (0, -1), "S": (0, +1), "E": (1, +1), "W": (1, -1)}


def np_shift(x: np.ndarray, direction: str, distance: int = 1, boundary: str = "zero"):
    """out[p] = x[p - sign * distance] along the direction's axis; zero or wrapped outside."""
    axis, sign = _AXIS_SIGN[direction]
    n = x.shape[axis]
    src = np.arange(n) - sign * distance
    if boundary == "periodic":
        return np.take(x, src % n, axis=axis)
    out = np.take(x, np.clip(src, 0, n - 1), axis=axis)
    bad = (src < 0) | (src >= n)
    index = [slice(None)] * x.ndim
    index[axis] = bad
    out[tuple(index)] = 0
    return out


def np_multicast(x: np.ndarray, direction: str, k: int, boundary: str = "zero"):
    """(rows, cols, k, ...): entry j is the value j + 1 PEs upstream."""
    return np.stack([np_shift(x, direction, j + 1, boundary) for j in range(k)], axis=2)


def available_meshes(num_devices: int) -> list[tuple[int, int]]:
    return [m for m in MESH_SHAPES if m[0] * m[1] <= num_devices]


MUTATIONS = ("truncate", "flip", "insert", "delete", "duplicate", "swap_digit")


def mutate(data: bytes, ops: list[tuple[int, int, int]]) -> bytes:
    """`data` corrupted by `ops`, each (kind, position, value) with kind an index into
    MUTATIONS: truncate at the position, replace a byte by `value`, insert `value`, delete
    `value % 16` bytes, duplicate a line, or swap a digit for another ('1' -> '9', so numbers
    stay numbers but go out of range). Positions wrap around the current length. A fuzz test
    draws `ops` with hypothesis; this function stays free of it."""
    b = bytearray(data)
    for kind, pos, value in ops:
        if not b:
            b = bytearray([value % 256])
            continue
        i = pos % len(b)
        name = MUTATIONS[kind % len(MUTATIONS)]
        if name == "truncate":
            del b[i:]
        elif name == "flip":
            b[i] = value % 256
        elif name == "insert":
            b.insert(i, value % 256)
        elif name == "delete":
            del b[i : i + 1 + value % 16]
        elif name == "duplicate":
            start = b.rfind(b"\n", 0, i) + 1
            end = b.find(b"\n", i)
            end = len(b) if end < 0 else end + 1
            b[start:start] = b[start:end]
        else:
            digits = [j for j in range(i, len(b)) if 48 <= b[j] <= 57]
            if digits:
                b[digits[0]] = 48 + value % 10
    return bytes(b)


def one_line_error(e: BaseException) -> bool:
    """True when `e`'s message is one non-empty line (how the `wse` command prints it)."""
    text = str(e)
    return bool(text.strip()) and "\n" not in text.strip()


def refused_without_jax(module: str, call: str, error: str) -> list[str]:
    """Run `from module import call, error; call()` in a fresh Python and return what it
    printed: `["refused", "False"]` when `call` raised `error` without importing JAX (a
    refusal the CLI gives before its slow imports). `call` is a call expression."""
    import subprocess
    import sys

    name = call.split("(")[0]
    code = (
        f"import sys\nfrom {module} import {error}, {name}\n"
        f"try:\n    {call}\nexcept {error}:\n    print('refused', 'jax' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.split() or [done.stderr]


def tiny_trace(seed: int = 3, rate: float = 0.05):
    """(a `PeTrace` of an 8 x 8 grid of the tiny preset, the remap of its wafer): dead PEs
    drawn with `seed` at `rate`, one SRAM allocation, and a step of phases counted on an
    uncalibrated model (an fp32 add repeated, a halo overlapped with an SRAM read)."""
    from wse_core import Op, PerfModel, Phase, RunReport, Work, overlap, preset, serial
    from wse_core.cost.calibration import UNCALIBRATED
    from wse_core.hw.defects import defect_map, remap
    from wse_core.hw.sram import SramLedger
    from wse_core.trace import trace_from

    spec = preset("tiny")
    dm = defect_map(spec, seed=seed, rate=rate)
    ledger = SramLedger.for_spec(spec, 8, 8)
    ledger.allocate("u", 128)

    class Wafer:  # the parts of a wse_core.Wafer a trace reads
        rows, cols, sram, defects = 8, 8, ledger, dm

    Wafer.spec, Wafer.remap = spec, remap(spec, dm)  # type: ignore[attr-defined]
    add = Phase("add", Work(ops=(Op("add", "fp32", 64),), links={"E": 10.0}), repeat=3)
    halo = Phase("halo", Work(links={"N": 5.0, "W": 7.0}, latency_hops=4))
    step = serial(add, overlap(halo, Phase("read", Work(sram_read_bytes=1600))), name="step")
    report = RunReport.build("t", spec, step, model=PerfModel(spec, UNCALIBRATED), units="step")
    return trace_from(Wafer, report), Wafer.remap  # type: ignore[attr-defined]
