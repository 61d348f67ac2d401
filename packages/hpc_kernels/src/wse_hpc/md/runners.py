"""MD's compiled programs for one window plan, and the cache that reuses them across runs.

Contract: `Runner(wafer, pot, plan, config, masses, n_atoms)` holds `init` (forces, lists;
`exec_cache.Cached`), `drift` (the lists' largest displacement, or None for the full-window
kernel) and `chunk(*args, kept=...)`, the compiled chunk of up to n steps, n its last
argument (a `lax.while_loop` that stops after a step that overflowed: one program for every
chunk length, as the shell's chunks end at rows and at list lifetimes, `segments`; `kept`:
steps that never rebuild the lists, for a chunk in which no rebuild is due, `kept_fits`),
each stored on disk by `exec_cache`; the numba PE
kernels their lists call (`ListFns.kernels`) are compiled by helper processes while a
program not on disk is traced (`pe_compile`). `runner_for(..., runners)` takes the runner
of the same static choices from the caller's `runners` dict, or builds it there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from wse_core.hw.wafer import Wafer

from wse_hpc.md import exec_cache
from wse_hpc.md.config import MdConfig
from wse_hpc.md.eam import EamPlan, eam
from wse_hpc.md.integrate import integrator
from wse_hpc.md.neighbours import neighbour_fns
from wse_hpc.md.potentials import EamPotential
from wse_hpc.md.state import MdState

__all__ = ["Runner", "runner_for"]


class Runner:
    """Compiled functions for one window plan: `init` (forces, lists) and chunks of steps."""

    def __init__(self, wafer, pot, plan, config, masses, n_atoms):
        self.wafer, self.plan = wafer, plan
        lists = neighbour_fns(wafer, pot, plan) if plan.caps else None  # else: full window
        fns = eam(wafer, pot, plan)
        make = functools.partial(
            integrator, config.thermostat, fns, masses, config.dt_fs, wafer=wafer, n_atoms=n_atoms
        )
        init_fn, step = make(lists=lists)
        # the step when no list rebuild is due: the same numbers, a program without the
        # sort, the build and its coverage test (32,000 atoms: 1.6 s of CPU to compile, not 10)
        kept = make(lists=lists._replace(rebuild=False)).step_fn if lists else None
        self._steps = {False: step, True: kept}
        self._key = exec_cache.runner_key(wafer, pot, plan, config, masses, n_atoms)
        self._kernels = lists.kernels if lists else ()  # the numba PE kernels, compiled aside
        self.init = exec_cache.Cached(init_fn, ("init", self._key), self._kernels)  # or loaded
        self.drift = exec_cache.Cached(lists.drift_fn, ("drift", self._key)) if lists else None
        self._chunks: dict[bool, Callable] = {}

    def kept_fits(self, n: int, state: MdState) -> bool:
        """Whether the next `n` steps from `state` can run as the chunk without rebuilds:
        the runner has it (lists) and no rebuild is due in them (age + n < every)."""
        if self._steps[True] is None:
            return False
        return int(state.nbrs.age) + n < int(state.nbrs.every)

    def chunk(self, *args, kept: bool = False) -> Callable:
        """The compiled chunk (compiled once, at `args`): `(state, geo, key, step0, n) ->
        (state, steps run)`, up to n steps (int32), stopping after a step that overflowed;
        `kept`: its steps never rebuild the lists (only when `kept_fits`)."""
        if kept not in self._chunks:
            step = self._steps[kept]

            def run(state: MdState, geo, key, step0, n):
                def cond(c):
                    return (c[0] < n) & ~c[1].eam.overflow

                def body(c):
                    i, st = c
                    return i + 1, step(st, geo, jax.random.fold_in(key, step0 + i))

                i, state = jax.lax.while_loop(cond, body, (jnp.int32(0), state))
                return state, i

            key = ("kept" if kept else "chunk", self._key)
            self._chunks[kept] = exec_cache.compiled(jax.jit(run), args, key, self._kernels)
        return self._chunks[kept]


def runner_for(
    wafer: Wafer, pot: EamPotential, plan: EamPlan, config: MdConfig, masses, n: int, runners
):
    """The `Runner` of these static choices: taken from `runners` (the caller's cache, a
    dict; None: none) when an earlier run put one there with the same ones (a repeat of a
    run, as a benchmark's, compiles nothing again: 4,000 to 32,000 atoms compiled for
    20-46 s a run), else built (and put there). The wafer enters by value (spec, grid, mesh
    and its devices, defects): a new run builds its own, with an equal mesh."""
    if runners is None:
        return Runner(wafer, pot, plan, config, masses, n)
    devices = tuple(int(d.id) for d in wafer.mesh.devices.flat)
    where = (repr(wafer.spec), repr(wafer.describe()), devices, config.defect_seed)
    key = (where, pot, plan, config.thermostat, config.dt_fs, tuple(np.asarray(masses)), n)
    if key not in runners:  # the potential by identity (EamPotential has eq=False)
        runners[key] = Runner(wafer, pot, plan, config, masses, n)
    return runners[key]
