"""The CFD shell's step files (`step_<n>.npz`, written by `wse_hpc.fields.runs`), found and
checked with NumPy alone: `wse_hpc.fields` imports JAX, and `wse hpc cfd --restart` refuses a
bad step file before JAX is imported (hunt 60: 1.5 s to say "step -5").

`latest_output(out_dir)` is the newest `step_<n>.npz` there (or None); `read_step(path,
shape)` its arrays, or `StepFileError` naming what is wrong: not an .npz archive (or not a
regular file), an array missing (T may be, in a cavity's step: it solves none), a field not
of `shape`, not finite or past FIELD_MAX, `step` not one integer >= 0 or not the step the
file's name says, `time` not one finite number >= 0, `lengths` (the domain's sides) not
finite numbers > 0 (hunt 78: [0, -1, 1] was "restart with the --aspect it was written
with"), and, given the run's domain, sides outside --aspect's range; given the run's case and
domain, a step written by another. Values are shown as numbers (`shown_array`), never as
array(...). Nothing is unpickled. `step_case(data)` is the case a step's arrays say they
were written by (the restart reads a rayleigh-benard step's T as the full temperature by it).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from wse_core.errors import WseError, shown_setting

__all__ = ["StepFileError", "latest_output", "read_step", "shown_array", "step_case", "step_of"]

_STEP_FILE = re.compile(r"step_(\d+)\.npz$")
# The run is fp32: a field value past this has a square past fp32's range, so the kinetic
# energy and the advective products overflow at any --dt (hunt 64: u = 1e30 ran, then the
# run "blew up at step 41 with --dt 1e-09; give a smaller --dt", the smallest it takes).
FIELD_MAX = float(np.sqrt(np.finfo(np.float32).max))  # 1.8e19


class StepFileError(WseError):
    """A step file that cannot be restarted from."""


def step_of(path: Path) -> int:
    """The step number of a `step_<n>.npz` file's name (`latest_output`'s)."""
    m = _STEP_FILE.search(path.name)
    if m is None:
        raise ValueError(f"{path.name!r} is not a step_<n>.npz name")
    return int(m.group(1))


def latest_output(out_dir: Path) -> Path | None:
    """The newest `step_<n>.npz` in out_dir, or None."""
    found = [
        (int(m.group(1)), p) for p in out_dir.glob("step_*.npz") if (m := _STEP_FILE.search(p.name))
    ]
    return max(found)[1] if found else None


def read_step(
    path: Path,
    shape: tuple[int, ...],
    *,
    case: str | None = None,
    lengths: tuple[float, ...] | None = None,
) -> dict[str, np.ndarray]:
    """A step file's arrays (fields of `shape`), or StepFileError naming what is wrong; with
    `case` and `lengths` (the run's domain sides), also a step of another case or domain
    (hunt 62: a cavity run continued a Rayleigh-Benard series, an --aspect 3 run one of 2)."""
    from wse_core.errors import NUMPY_FILE_ERRORS, numpy_file_problem
    from wse_core.host.memory import HostMemoryError
    from wse_core.host.readers import open_npz, require_npz

    try:  # mmap: a .npy named step_<n>.npz is not read whole
        z = open_npz(path, f"--restart: {path}", mmap_mode="r")
        with z:
            require_npz(
                z, f"--restart: {path}", fits=lambda budget: "it is no step file of this run"
            )
            data = {k: z[k] for k in z.files}
    except HostMemoryError:  # its own line (a WseError is a ValueError)
        raise
    except NUMPY_FILE_ERRORS as e:
        problem = numpy_file_problem(e)
        raise StepFileError(f"--restart: {path} is not a step file: {problem}") from None
    # the cavity solves no temperature: its steps hold no T (hunt 71), older ones a T of zeros
    needs_t = step_case(data) != "cavity"
    needed = ("u", "v", "p", "T", "step", "time") if needs_t else ("u", "v", "p", "step", "time")
    missing = [k for k in needed if k not in data]
    if missing:
        raise StepFileError(f"--restart: {path} lacks the arrays {', '.join(missing)}")
    three_d = len(shape) > 2 and shape[2] > 1  # w is read only then
    fields = ("u", "v", "w", "p", "T") if three_d else ("u", "v", "p", "T")
    for k in fields if "T" in data else fields[:-1]:
        _check_field(path, k, data.get(k), tuple(shape))
    step, t = data["step"], data["time"]  # hunt 60: a step of -5 or a time of inf ran on
    if step.shape != () or step.dtype.kind not in "iu" or not 0 <= step < 2**62:
        raise StepFileError(
            f"--restart: {path}'s step must be one integer >= 0, got {shown_array(step)}"
        )
    named = _STEP_FILE.search(path.name)
    if named and int(named.group(1)) != int(step):  # hunt 64: --restart redid one step forever
        raise StepFileError(
            f"--restart: {path} holds step {int(step)} (its name says {int(named.group(1))}); "
            f"rename it step_{int(step):07d}.npz"
        )
    if t.shape != () or t.dtype.kind not in "iuf" or not 0 <= t < np.inf:
        raise StepFileError(
            f"--restart: {path}'s time must be one finite number >= 0, got {shown_array(t)}"
        )
    if case is not None and (written := step_case(data)) not in (None, case):
        raise StepFileError(
            f"--restart: {path} is a step of case {written!r}; this run's case is {case!r} "
            f"(restart with --case {written}, or give a new --out)"
        )
    if "lengths" in data:
        _check_lengths(path, data["lengths"], ranged=lengths is not None)
        if lengths is not None:
            _same_lengths(path, data["lengths"], lengths)
    return data


def shown_array(a: np.ndarray) -> str:
    """A step file's array as a refusal shows it: one number or string as written (nan,
    -1e+300, 'rk9'), a larger array by its first values, dtype and shape."""
    a = np.asarray(a)
    if a.shape == ():
        return shown_setting(a.item())
    head = ", ".join(shown_setting(x) for x in a.ravel()[:4].tolist())
    return f"[{head}{', ...' if a.size > 4 else ''}] ({a.dtype} {a.shape})"


def _check_lengths(path: Path, a: np.ndarray, *, ranged: bool) -> None:
    """StepFileError unless the domain's sides are finite numbers > 0 (NumPy alone, before
    JAX) and, `ranged` (the caller has imported `wse_hpc.fields`, hence JAX), each within
    --aspect's range: every run's sides are its aspect or 1."""
    low, high = 0.0, np.inf
    if ranged:
        from wse_hpc.fields.run_config import RANGES

        low, high = RANGES["aspect"]
    real = a.dtype.kind in "iuf" and a.ndim == 1 and a.size > 0
    if real and np.isfinite(a).all() and (a > 0).all() and low <= a.min() and a.max() <= high:
        return
    allowed = f"in [{low:g}, {high:g}] (--aspect's range; the height is 1)" if ranged else "> 0"
    raise StepFileError(
        f"--restart: {path} is a damaged step file: its lengths (the domain's sides) must be "
        f"finite numbers {allowed}, got {shown_array(a)}"
    )


def _check_field(path: Path, k: str, a: np.ndarray | None, shape: tuple[int, ...]) -> None:
    """StepFileError unless `a` is a real field of `shape`, finite, within FIELD_MAX."""
    if a is None:
        raise StepFileError(f"--restart: {path} lacks the array {k} (a 3-D run's velocity)")
    if a.dtype.kind not in "iuf" or a.shape != shape:
        raise StepFileError(
            f"--restart: {path}'s {k} is {a.dtype} {a.shape}; this run's grid is {shape} "
            "(restart with the --grid it was written with)"
        )
    if not np.isfinite(a).all():
        raise StepFileError(f"--restart: {path}'s {k} holds NaN or infinite values")
    big = float(np.abs(a).max(initial=0))
    if big > FIELD_MAX:
        raise StepFileError(
            f"--restart: {path}'s {k} holds {big:.3g}; its square overflows fp32 (past "
            f"{FIELD_MAX:.2g}), so the run would blow up at any --dt: restart from a sound "
            "step file"
        )


def step_case(data: dict[str, np.ndarray]) -> str | None:
    """The case a step file was written by: its `case`, else (a file written before hunt 62)
    "rayleigh-benard" where it has that case's `theta_offset`; else None (unknown: a cavity's
    step then, or a file made by hand)."""
    if "case" in data and data["case"].shape == () and data["case"].dtype.kind == "U":
        return str(data["case"])
    return "rayleigh-benard" if "theta_offset" in data else None


def _same_lengths(path: Path, written: np.ndarray, lengths: tuple[float, ...]) -> None:
    ok = written.shape == (len(lengths),) and written.dtype.kind in "iuf"
    if ok and np.allclose(written, lengths, rtol=1e-6, atol=0):
        return
    shown = [float(x) for x in written.ravel()[:3]] if written.dtype.kind in "iuf" else written
    raise StepFileError(
        f"--restart: {path} holds a domain of sides {shown!s:.60}; this run's is "
        f"{[float(x) for x in lengths]} (restart with the --aspect it was written with, or "
        "give a new --out)"
    )
