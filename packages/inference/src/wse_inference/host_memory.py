"""Whether this host can hold a served model: its parameters and KV-cache rows, before JAX.

`serving_host_bytes(config, rows=, max_context=)` is the host bytes of a served model (float32
parameters and `rows` cache rows of `max_context` positions; CPU devices are host memory);
`check_host_memory(config, rows=, max_context=, what=)` refuses (`HostMemoryError`, one line)
a size the host cannot hold and says how many rows, or what context, would fit. Its callers
read config.json alone first (`model_dir.read_config`), so nothing is built before it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_host_memory", "serving_host_bytes"]


def serving_host_bytes(config: Any, *, rows: int, max_context: int) -> int:
    """Host bytes of a served model: its float32 parameters and `rows` KV-cache rows of
    `max_context` positions (`wse_models.cache_bytes`; CPU devices are host memory)."""
    from wse_models.cache import cache_bytes

    context = min(max_context, config.max_seq_len)
    return 4 * int(config.num_params()) + cache_bytes(config, rows, context)


def check_host_memory(
    config: Any, *, rows: int, max_context: int, what: str, held_bytes: int = 0
) -> None:
    """Refuse (`HostMemoryError`, one line) a model with `rows` cache rows of `max_context`
    that the host cannot hold; say how many rows, or what context, would fit. `held_bytes`:
    weights already read (`read_weights`), part of the parameters, not counted twice."""
    from wse_core.host.memory import largest, require

    def fits(budget: int) -> str:
        r = largest(
            lambda k: serving_host_bytes(config, rows=k, max_context=max_context), budget, hi=rows
        )
        c = largest(
            lambda k: serving_host_bytes(config, rows=rows, max_context=k),
            budget,
            hi=min(max_context, config.max_seq_len),
        )
        options = [f"{r} rows of context {max_context}"] if r else []
        options += [f"context {c} with {rows} rows"] if c else []
        if not options:  # a suggestion is always one that passes this check
            one = largest(
                lambda k: serving_host_bytes(config, rows=1, max_context=k),
                budget,
                hi=min(max_context, config.max_seq_len),
            )
            if not one:
                return "not even the parameters with one row of context 1 fit"
            options = [f"context {one} with 1 row"]
        return f"at most {', or '.join(options)}, fit"

    needed = serving_host_bytes(config, rows=rows, max_context=max_context)
    require(what, needed, fits=fits, held_bytes=held_bytes)
