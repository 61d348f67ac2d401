"""What bench_infer's sections share: the models they decode and the interleaved timing.

`tiny_llama(n_layers, d, vocab, head_scale, seed)` is the random llama the sections run (its
output head scaled by `head_scale`, which sets how peaked the next-token distributions are).
`interleaved_calls(fns, rounds)` runs each fn once per round (`rounds.interleaved`, rotating
order) with Python's garbage collector off during each call (collected just before it, so
no collection pauses land inside one side's timing) -> name: [(seconds, cpu_util, result)].
"""

from __future__ import annotations

import dataclasses
import gc
import resource
import time

from rounds import interleaved

__all__ = ["cpu_s", "interleaved_calls", "tiny_llama"]


def cpu_s() -> float:
    """The process's CPU seconds (user + system) so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def interleaved_calls(fns: dict, rounds: int) -> dict[str, list[tuple[float, float, object]]]:
    """Each round calls every fn once (`rounds.interleaved`, rotating order) -> name:
    [(seconds, cpu_util, result)]: seconds is the fn's own timing when it returns (seconds,
    ...), else the call's wall time; cpu_util is the process CPU seconds / wall seconds of
    the whole call. The garbage collector is off during each call."""
    out: dict[str, list] = {n: [] for n in fns}

    def timed(n):
        def run() -> float:
            gc.collect()
            gc.disable()
            try:
                c0, t0 = cpu_s(), time.perf_counter()
                res = fns[n]()
                wall = time.perf_counter() - t0
                c1 = cpu_s()
            finally:
                gc.enable()
            out[n].append((res[0] if isinstance(res, tuple) else wall, (c1 - c0) / wall, res))
            return out[n][-1][0]

        return run

    interleaved({n: timed(n) for n in fns}, rounds, rotate=True)
    return out


def tiny_llama(n_layers: int, d: int, vocab: int, head_scale: float = 1.0, seed: int = 0):
    """A random llama of `n_layers` x `d` (4 heads, 2 KV heads, d_ff 3d, 512 positions)."""
    from wse_inference.testing import tiny_model

    m = tiny_model(
        "llama",
        n_layers=n_layers,
        d_model=d,
        n_heads=4,
        n_kv_heads=2,
        d_ff=3 * d,
        max_seq_len=512,
        vocab_size=vocab,
        seed=seed,
    )
    params = dict(m.params)
    params["final"] = {**m.params["final"], "head": m.params["final"]["head"] * head_scale}
    return dataclasses.replace(m, params=params)
