"""What a trace's header holds, field by field: the checks `wse_core.trace.reader.load` runs
on each record and on `meta`, and the keys `wse_core.trace.page` carries into its page (hunt
68: a file's unknown keys went whole into the page). A module of its own so that the page
reads the tables without importing the reader (schema -> page -> reader -> schema would be an
import circle)."""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "FIELDS", "META", "MAX_RECORDS", "MAX_TEXT", "TEXT_WORDS", "is_str", "is_number", "is_ints",
    "sram_capacity",
]  # fmt: skip

MAX_TEXT = 1000  # characters of a name in a header (a page title, a PNG's caption)
MAX_RECORDS = 10_000  # phases, allocations, regions (the producers write < 1,000 of each)
TEXT_WORDS = f"a text of at most {MAX_TEXT:,} characters"


def is_str(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= MAX_TEXT


def is_number(v: Any) -> bool:
    # math: np.isfinite of an int past int64 is a TypeError (hunt 64: cycles of 10**300)
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def is_ints(v: Any, n: int) -> bool:
    return isinstance(v, list) and len(v) == n and all(type(x) is int for x in v)


# What each entry of the header's lists holds, as the page and the PNG read it.
FIELDS: dict[str, dict[str, Any]] = {
    "phases": {
        "name": is_str,  # the page labels each critical PE with it
        "path": is_str,
        "cycles": is_number,
        "bound": is_str,
        "critical_pe": lambda v: v is None or is_ints(v, 2),
    },
    "allocations": {
        "name": is_str,
        "bytes_per_pe": is_number,
        "region": lambda v: is_ints(v, 4),
    },
    "regions": {"name": is_str, "rect": lambda v: is_ints(v, 4)},
}
# hunt 64: clock_hz and critical_cycles were NaN in the page's JSON; a bound of 2,000,000
# characters took minutes in the PNG's title
META = {
    "clock_hz": is_number,
    "predicted_s": is_number,
    "critical_cycles": is_number,
    "units": is_str,
    "critical_phase": is_str,
    "bound": is_str,
    # hunt 82 L2: the SRAM layer's capacity, a PE's bytes and its program's (assumed) share
    "sram_bytes_per_pe": is_number,
    "code_stack_bytes_per_pe": is_number,
}


def sram_capacity(meta: dict[str, Any]) -> str:
    """What the SRAM layer is measured against, from a trace's meta: "of 47,104 B a PE
    holds for data (49,152 B less 2,048 B of program, assumed)"; "" where the meta has no
    capacity (a file written before hunt 82)."""
    whole, reserve = meta.get("sram_bytes_per_pe"), meta.get("code_stack_bytes_per_pe", 0)
    if not is_number(whole) or not is_number(reserve):
        return ""
    if not reserve:
        return f"of {whole:,.0f} B a PE holds"
    return (
        f"of {whole - reserve:,.0f} B a PE holds for data ({whole:,.0f} B less {reserve:,.0f} B "
        "of program, assumed)"
    )
