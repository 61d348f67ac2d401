"""The performance model every shell prices with: `PerfModel(spec)` is `wse_core.cost.pricing`'s
`Pricing` with the calibration in force (`wse_core.cost.calibration.current()`, fitted lazily on
the calibration set) unless one is given (`wse_core.cost.calibration.UNCALIBRATED` keeps the
spec's own values); a fitted constant an `assume` block holds is priced at its held value
either way (`wse_core.cost.assumptions.held`).

Contract. The mechanism API (`Work`, `Op`, `Cost`, `Phase`, `Phases`, `serial`, `overlap`,
`Timing`, `OVERLAP`) is `wse_core.cost.pricing`'s, named here too so that a shell imports one
module. The layers: `pricing` (below the calibration: it prices with the constants it is
given and imports no case), `calibration` (fits constants by pricing its cases), this
module (the calibrated default). Every shell wraps the evaluated tree in a
`wse_core.cost.report.RunReport`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wse_core.cost.pricing import OVERLAP, Cost, Phase, Phases, Pricing, Timing, overlap, serial
from wse_core.cost.work import LINK_DIRECTIONS, Op, Work

if TYPE_CHECKING:
    from wse_core.cost.calibration import Calibration

__all__ = [
    "OVERLAP",
    "LINK_DIRECTIONS",
    "Op",
    "Work",
    "Cost",
    "Phase",
    "Phases",
    "Timing",
    "PerfModel",
    "serial",
    "overlap",
]


class PerfModel(Pricing):
    """`Pricing` whose default calibration is the one in force (`calibration.current()`)."""

    def calibration_in_force(self) -> Calibration:
        """The calibration given, else the one in force (`calibration.current()`)."""
        if self.calibration is not None:
            return self.calibration
        from wse_core.cost.calibration import current

        return current()
