"""Kernel reports: what a run used (SRAM, fabric traffic), took (measured) and would take
on the wafer (predicted), in one JSON-ready record.

Every kernel shell returns a `Report` next to its numerical result. `measured_wall_s` is the
emulator's wall time on this machine; `predicted` is the performance model's wafer time for
the same work, so the two stand side by side.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from wse_core.perf import Prediction
from wse_core.traffic import Traffic

__all__ = ["Report", "stopwatch"]


@dataclasses.dataclass
class Report:
    name: str
    sram: dict[str, Any]
    traffic: Traffic
    measured_wall_s: float
    predicted: Prediction | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sram": self.sram,
            "traffic": self.traffic.to_dict(),
            "measured_wall_s": self.measured_wall_s,
            "predicted": None if self.predicted is None else self.predicted.to_dict(),
            **self.extra,
        }


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """`with stopwatch() as t: ...` then `t["s"]` is the elapsed wall time in seconds."""
    t: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield t
    finally:
        t["s"] = time.perf_counter() - start
