"""Interleaved rounds and the ratios they give: the one timing grammar of every bench.

The machine the benches run on is shared, so a single side-by-side timing can move by more
than a target's margin. Every bench therefore times its contenders in interleaved rounds
(ours, peer, ours, peer, ...), each round giving one time per contender, and reports per
pair the ratio of each round (peer time / our time: above 1 we are faster), its median,
its spread (lowest and highest round) and its worst round. A target is met when the median
reaches it and no round loses to the peer (worst round >= 1).

Each bench's JSON also carries `record(...)`: the host (`wse_core.host.memory.host_record`:
bandwidth, load average, CPUs, time), the versions of the baselines it ran against and the
thread settings they ran with (environment, BLAS/OpenMP pools seen by threadpoolctl, torch's
intra-op threads, the CPUs the process may use).

    from rounds import interleaved, ratio, record   # bench/ is the script's own folder
"""

from __future__ import annotations

import importlib.metadata
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["THREAD_VARIABLES", "interleaved", "ratio", "ratio_line", "record", "timed", "versions"]

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "XLA_FLAGS",
)


def interleaved(
    contenders: Mapping[str, Callable[[], float]],
    rounds: int,
    *,
    settle_s: float = 0.0,
    rotate: bool = False,
) -> dict[str, list[float]]:
    """Run every contender once per round, in the mapping's order, `rounds` times.

    Each contender times itself and returns seconds (lower is better); `settle_s` of idle
    before each one lets BLAS worker threads stop spinning; `rotate` starts round r at the
    (r mod k)-th of the k contenders (no one always runs right after the same other).
    Returns the times per contender, round by round."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        first = r % len(names) if rotate and names else 0
        for name in names[first:] + names[:first]:
            fn = contenders[name]
            if settle_s > 0:
                time.sleep(settle_s)
            times[name].append(float(fn()))
    return times


def timed(fn: Callable[[], Any]) -> Callable[[], float]:
    """`fn` as a contender of `interleaved`: one call, its wall seconds."""

    def run() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return run


def ratio(
    ours_s: Sequence[float],
    peer_s: Sequence[float],
    target: float | None = None,
    floor: float = 1.0,
) -> dict[str, Any]:
    """Per-round speedup peer / ours of two equally long lists of round times (seconds).

    `median` decides a target; `spread` is [lowest, highest] round; `worst` the lowest;
    `met` (with a target) is median >= target and worst >= `floor` (default 1: no round
    loses to a peer; a target below 1 against our own other path, such as the streamed step
    against the fused one, gives its own floor)."""
    if len(ours_s) != len(peer_s) or not ours_s:
        raise ValueError(f"need equal, non-empty rounds: {len(ours_s)} and {len(peer_s)}")
    per_round = [p / o for o, p in zip(ours_s, peer_s, strict=True)]
    out: dict[str, Any] = {
        "median": statistics.median(per_round),
        "spread": [min(per_round), max(per_round)],
        "worst": min(per_round),
        "rounds": per_round,
    }
    if target is not None:
        out["target"] = target
        out["floor"] = floor
        out["met"] = bool(out["median"] >= target and out["worst"] >= floor)
    return out


def ratio_line(name: str, r: Mapping[str, Any]) -> str:
    """One printable line of a `ratio` result."""
    lo, hi = r["spread"]
    line = (
        f"{name}: median {r['median']:.2f}x (rounds {lo:.2f}-{hi:.2f}x, worst {r['worst']:.2f}x,"
        f" {len(r['rounds'])} rounds)"
    )
    if "target" in r:
        verdict = "met" if r["met"] else "NOT met"
        floor = r.get("floor", 1.0)
        line += f"; target >= {r['target']:g}x and no round < {floor:g}x: {verdict}"
    return line


def versions(*distributions: str) -> dict[str, str | None]:
    """Installed versions of `distributions` (None where one is not installed)."""
    out: dict[str, str | None] = {}
    for name in distributions:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _threads() -> dict[str, Any]:
    out: dict[str, Any] = {k: os.environ.get(k) for k in THREAD_VARIABLES}
    if hasattr(os, "sched_getaffinity"):
        out["cpus"] = sorted(os.sched_getaffinity(0))
    try:
        from threadpoolctl import threadpool_info

        out["pools"] = [
            {k: p.get(k) for k in ("user_api", "internal_api", "num_threads", "version")}
            for p in threadpool_info()
        ]
    except ImportError:
        out["pools"] = None
    if "torch" in sys.modules:  # only when the bench itself runs torch
        out["torch_threads"] = sys.modules["torch"].get_num_threads()
    return out


def record(*baselines: str, **extra: Any) -> dict[str, Any]:
    """The bench JSON's record of what ran: host, baseline versions, thread settings.

    `baselines` names the distributions compared against (numpy, scipy, torch, ...); jax
    and jaxlib are always listed; `extra` adds entries such as a peer's own version line."""
    from wse_core.host.memory import host_record

    return {
        "host": host_record(),
        "baselines": {**versions("jax", "jaxlib", *baselines), **extra},
        "threads": _threads(),
    }
