"""The shell around the TLR-MVM kernel: place once, jit once, run, time, report.

`TlrEngine.build(op, spec, ...)` plans the layout (`grouped_plan.plan_grouped` by default, its
group size chosen by `perf.product_s`), places it (`wafer.place_plan`), jits the pure
`matvec_fn` / `rmatvec_fn` of the layout, and offers `matvec(x)` / `rmatvec(y)` on NumPy
vectors ((N,) or (N, b)), `time_matvec(x, repeats)` (median wall seconds after a warm-up
compile), and `report(measured_wall_s=...)`: the `wse_core.RunReport` of `perf.predict`,
priced from this engine's own plan and its own product's traced fabric (without a
measurement: the prediction alone). A long-lived engine that its caller times, as the
inference engines are: `engine.report(measured_wall_s=...)` is the one name for its report.
Only this module decides jit and timing.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec
from wse_core.cost.report import RunReport
from wse_core.host.runtime import median_wall_s
from wse_core.hw.spec import WaferSpec
from wse_core.hw.wafer import Wafer

from wse_hpc.tlrmvm.compress import TlrError, TlrOperator, check_length
from wse_hpc.tlrmvm.fp32 import to_fp32
from wse_hpc.tlrmvm.grouped import KERNELS, tlrmvm_grouped
from wse_hpc.tlrmvm.grouped_plan import GroupedPlan, plan_grouped
from wse_hpc.tlrmvm.packed import PackedPlan, plan_packed, tlrmvm_packed
from wse_hpc.tlrmvm.perf import Deployment, predict, product_s
from wse_hpc.tlrmvm.wafer import (
    TlrBases,
    TlrFns,
    TlrPlan,
    place_plan,
    plan_placement,
    tlrmvm,
)

__all__ = ["TlrEngine", "as_batch"]


def as_batch(x: np.ndarray, n: int, complex_ok: bool, what: str = "x") -> np.ndarray:
    """x as a 2-D (n, b) batch in the wafer's dtype (`fp32.to_fp32`: float32, complex64 when
    complex); TlrError for a wrong length, dimension or dtype, no vector, or a value fp32
    cannot hold. The cast is made here, on the host, and checked after: a finite float64 of
    1e39 is inf in fp32 (hunt 65: the product came back NaN), and JAX would wrap an int64
    to int32 (2**40 + 1 became 1). Integers are rounded to fp32 as floats are: above 2**24
    fp32 holds only every other integer, and so on, within its 24-bit relative precision."""
    x = np.asarray(x)
    check_length(x, n, what)
    if x.ndim == 2 and x.shape[1] == 0:  # hunt 65: a ZeroDivisionError inside JAX
        raise TlrError(f"{what} must hold at least one vector, got shape {x.shape}")
    if np.iscomplexobj(x) and not complex_ok:
        raise TlrError(f"{what} is complex but the operator is real; pass a real vector")
    x = to_fp32(x, what, TlrError)
    if not np.isfinite(x).all():
        raise TlrError(f"{what} holds NaN or infinite values")
    return x.reshape(n, -1)


@dataclasses.dataclass(eq=False)
class TlrEngine:
    op: TlrOperator
    wafer: Wafer
    plan: TlrPlan | PackedPlan | GroupedPlan
    bases: TlrBases
    fns: TlrFns
    _matvec: object
    _rmatvec: object

    @classmethod
    def build(
        cls,
        op: TlrOperator,
        spec: WaferSpec,
        *,
        rank_chunk: int | None = None,
        batch: int = 1,
        mesh_shape: tuple[int, int] | None = (1, 1),
        defect_seed: int | None = None,
        layout: str = "grouped",
        kernel: str = "auto",
    ) -> TlrEngine:
        """`layout`: "grouped" (PE rows serve groups of tile columns and rows, PE columns
        hold rank rows by an edge colouring, `grouped`: its group size the one whose product
        `perf.product_s` predicts fastest), "packed" (slices bucketed per tile column,
        `packed`) or "banded" (each tile row padded to its largest rank, `wafer`). `mesh_shape`: the
        device mesh under the PE grid; one device by default, since the phases are a few
        large dots and collectives between virtual devices only add cost (grouped, 2
        devices: 2-2.6x slower at n = 2500-4900, ~10% at 9801); None spreads the grid
        over all devices. `kernel` (grouped only): "auto", "pe" or "xla", see
        `grouped.tlrmvm_grouped`."""
        layouts = {
            "grouped": (
                functools.partial(plan_grouped, price=product_s),
                functools.partial(tlrmvm_grouped, kernel=kernel),
            ),
            "packed": (plan_packed, tlrmvm_packed),
            "banded": (plan_placement, tlrmvm),
        }
        if layout not in layouts:
            raise TlrError(f"unknown layout {layout!r}; use 'grouped', 'packed' or 'banded'")
        if kernel not in KERNELS:  # hunt 61: was ignored unless the layout is grouped
            raise TlrError(f"unknown kernel {kernel!r}; use one of {', '.join(KERNELS)}")
        if kernel == "pe" and layout != "grouped":  # 'xla' is what the other layouts run
            raise TlrError(
                f"kernel {kernel!r} applies to the grouped layout only; the {layout} layout "
                "runs XLA dots: leave the kernel out (auto) or give 'xla'"
            )
        planner, factory = layouts[layout]
        plan = planner(op, spec, rank_chunk=rank_chunk, batch=batch)
        wafer, bases = place_plan(op, spec, plan, mesh_shape=mesh_shape, defect_seed=defect_seed)
        fns = factory(wafer, plan)
        if fns.store_fn is not None:  # the order the products read the bases in
            bases = fns.store_fn(bases)
        return cls(op, wafer, plan, bases, fns, jax.jit(fns.matvec_fn), jax.jit(fns.rmatvec_fn))

    @property
    def kernel(self) -> str:
        """What computes inside the PEs: "pe" (the PEs' numba kernels) or "xla" (XLA dots)."""
        return self.fns.kernel

    def _put(self, xb: np.ndarray) -> jax.Array | np.ndarray:
        """A batch on the wafer's mesh, replicated: the bases' mesh, so that a call takes
        jit's fast path (a single-device x beside mesh-placed bases costs ~60 us a call);
        as it is where the mesh spans other processes (jit places it)."""
        sharding = NamedSharding(self.wafer.mesh, PartitionSpec())
        return jax.device_put(xb, sharding) if sharding.is_fully_addressable else xb

    def _batch(self, x: np.ndarray, n: int, what: str) -> np.ndarray:
        """x checked and cast as a product takes it (`as_batch`): complex only for a complex
        operator (hunt 72: `time_matvec` timed a complex x that `matvec` refuses)."""
        return as_batch(x, n, np.iscomplexobj(np.zeros((), self.op.dtype)), what)

    def _run(self, fn, x: np.ndarray, n: int, what: str) -> np.ndarray:
        xb = self._batch(x, n, what)
        out = np.asarray(fn(self.bases, self._put(xb)))
        return out.reshape(-1) if np.ndim(x) == 1 else out

    def matvec(self, x: np.ndarray) -> np.ndarray:
        """A x for x of shape (N,) or (N, b)."""
        return self._run(self._matvec, x, self.op.shape[1], "x")

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        """A^H y for y of shape (M,) or (M, b)."""
        return self._run(self._rmatvec, y, self.op.shape[0], "y")

    def time_matvec(self, x: np.ndarray, repeats: int = 5) -> float:
        """Median wall seconds of one product (x already on the device, compile excluded)."""
        xb = self._put(self._batch(x, self.op.shape[1], "x"))
        return median_wall_s(self._matvec, self.bases, xb, repeats=repeats)

    def report(
        self,
        *,
        measured_wall_s: float | None = None,
        systems: int = 1,
        fill: bool = False,
        **extra: object,
    ) -> RunReport:
        """Measured next to predicted: the RunReport of this engine's plan and product on
        `systems` wafers (`fill`: each filled with copies of the operator), with the
        caller's measured wall time of one product (`time_matvec`; None: a prediction).
        `extra` adds the caller's figures to `report.extra`, after the report's own, none of
        which it may replace (hunt 72: `kernel="x"` overwrote the kernel that ran): a
        TlrError names the keys."""
        report = predict(
            self.wafer,
            self.plan,
            self.op,
            fns=self.fns,
            on=Deployment(systems, fill),
            measured_wall_s=measured_wall_s,
            extra={"operator": self.op.describe(), "kernel": self.kernel},
        )
        if clash := sorted(extra.keys() & report.extra.keys()):
            raise TlrError(
                f"report(): {', '.join(map(repr, clash))} would replace the report's own "
                f"figure{'s' if len(clash) > 1 else ''} of that name; give the caller's "
                "figures other names"
            )
        return dataclasses.replace(report, extra={**report.extra, **extra}) if extra else report
