"""What a `wse plan` (or `wse experiments run`) prediction was priced under, listed beside it.

`Assumed` is what a plan was priced under: the `--assume` changes, the calibration in force
(JSON "assume" and "calibration", the `Calibration`'s own `to_dict()`), notes on assumed
constants, and what its pricing read (`wse_core.cost.reads`, recorded around the planner):
every swept constant that moves its figures, with the value priced and its range (JSON
"assumed", `wse_core.cost.listing`; hunt 69: `clock_hz` moved the wafer's tokens/s 23% and
the plan listed no wafer constant). `priced_under` refuses an `--assume` key the pricing
never read (hunt 69: `--assume memoryx_bytes_per_s=7.5e10` was listed beside a serving plan
it did not touch). `register_system_constants` imports the packages that register their
constants with `wse_core.cost.assumptions` (`gpu.kernel_s`, `attention.exp_fmacs`, and
with `fields`, `gpu.launched_kernel_s`), so that `--assume` knows them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Assumed", "priced_under", "register_system_constants"]


def register_system_constants(*, fields: bool = False) -> None:
    """Import the modules that register system constants (the module docstring)."""
    from wse_systems import attention  # noqa: F401  attention.exp_fmacs
    from wse_systems.serving import gpu_step  # noqa: F401  gpu.kernel_s

    if fields:  # the field experiments' GPU: gpu.launched_kernel_s
        from wse_hpc.fields import alternative  # noqa: F401


class Assumed(NamedTuple):
    """What a plan was priced under: the `--assume` changes (key -> value), the calibration
    in force (`wse_core.cost.calibration.Calibration`), notes on assumed constants and what
    the pricing read (`wse_core.cost.reads.Reads`; None: not recorded)."""

    changes: dict[str, float]
    calibration: Any
    notes: list[str]
    reads: Any = None

    def listed(self) -> tuple:
        from wse_core.cost.listing import listed

        return listed(self.reads, self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {"assume": dict(self.changes), "calibration": self.calibration.to_dict(),
                "assumed": [e.to_dict() for e in self.listed()]}  # fmt: skip

    def lines(self) -> list[str]:
        """The table's notes: the assumptions in force, the calibration, the swept constants
        that move the figures, the notes."""
        from wse_core.cost.assumptions import CALIBRATION_PREFIX
        from wse_core.cost.mechanisms import CONSTANTS

        given = [f"{k}={v:g}" + (" (the calibration's wafer; refitted under it)"
                                 if k.startswith(CALIBRATION_PREFIX) else "")
                 for k, v in self.changes.items()]  # fmt: skip
        cal = self.calibration
        fitted = ", ".join(f"{k} = {v:.4g} {CONSTANTS[k].units}" for k, v in cal.values.items())
        missed = "".join(
            f"; the row {k} fits comes out {100 * m:+.1f}%" for k, m in cal.misses.items()
        )
        swept = [e.line() for e in self.listed() if e.moves]
        head = ["assumed constants that move these figures (value priced, swept range, basis; "
                "wse experiments assumptions gives each source):"] if swept else []  # fmt: skip
        # hunt 82 (jobs18 L1): an --assume'd constant the pricing read but no figure moves
        # with (InfiniBand's latency on a plan of one node) was listed as moving them
        still = [e.line() for e in self.listed() if not e.moves]
        idle = ["assumed (--assume) and read, moving no figure of this plan:"] if still else []
        return [
            "assumed (--assume): " + "; ".join(given) if given
            else "assumptions: the presets' own (no --assume)",
            f"calibration: rows priced on {cal.on_wafer()}; fitted {fitted or 'nothing'}{missed}",
            *head,
            *(f"  {line}" for line in swept),
            *idle,
            *(f"  {line}" for line in still),
            *self.notes,
        ]  # fmt: skip


def priced_under(changes: dict[str, float], notes: list[str], reads: Any, what: str) -> Assumed:
    """What a plan was priced under, read inside its `assume` block; a SpecError (one line,
    exit 2) where `changes` names a key its pricing never read (`refuse_unread`)."""
    from wse_core.cost.calibration import current
    from wse_core.cost.listing import refuse_unread

    cal = current()
    refuse_unread(changes, reads, cal, what)
    return Assumed(dict(changes), cal, notes, reads)
