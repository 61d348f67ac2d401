"""Cerebras's published whole-wafer figures beside the model's totals (hunt 76: `wse wafer
info` printed a "fabric bandwidth" with no definition, 0.37x and 0.59x of the published 220
and 214 Pb/s, and a preset comment said 24 B a cycle matched the 20 PB/s total; it is 0.77x).

`PUBLISHED` holds the vendor figures of REFERENCES.md by preset name; nothing is fitted to
them (the per-cycle figures come from the SDK and the stencil paper and feed the
calibration). A spec is compared with them only where it is that preset's wafer: its name
and the fields its totals count (`IDENTITY`: the PE grid, SRAM and ports; a clock assumed
otherwise is shown as ours) (hunt 81: `--set name=wse3` on `tiny`, or a WSE-2 file named
wse3, was compared with WSE-3's 44 GB). `published_totals(spec)` states each total of the
spec, what it counts, and for a preset with published figures the figure, the ratio ours /
published and a line on the gap:
the arithmetic that reproduces Cerebras's figure (its core count, and the clock or bytes per
core a cycle it implies), marked inferred where Cerebras does not publish its accounting.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from wse_core.hw.description import WaferSpec
from wse_core.hw.presets import PRESETS

__all__ = ["PUBLISHED", "IDENTITY", "published_totals"]

# Cerebras's published whole-wafer figures (REFERENCES.md, vendor): cores as marketed, SRAM
# in bytes, SRAM bandwidth in B/s, fabric bandwidth in bit/s. Shown beside the model's totals
# (`published_totals`); nothing is fitted to them.
PUBLISHED: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "wse1": {"cores": 400_000, "sram_bytes": 18e9, "sram_bytes_per_s": 9e15},
        "wse2": {
            "cores": 850_000,
            "sram_bytes": 40e9,
            "sram_bytes_per_s": 20e15,
            "fabric_bits_per_s": 220e15,
        },
        "wse3": {
            "cores": 900_000,
            "sram_bytes": 44e9,
            "sram_bytes_per_s": 21e15,
            "fabric_bits_per_s": 214e15,
        },
    }
)
_INFERRED = "inferred: Cerebras publishes neither the basis of its core count nor its clock"
# The fields of a preset that make a spec its wafer for the published comparison: what the
# totals count, less the clock (an assumption any run may change, shown as ours)
IDENTITY = (
    "pe_rows",
    "pe_cols",
    "sram_bytes_per_pe",
    "sram_read_bytes_per_cycle",
    "sram_write_bytes_per_cycle",
    "link_bytes_per_cycle",
)


def _published_for(spec: WaferSpec) -> tuple[Mapping[str, float] | None, str]:
    """(Cerebras's figures for `spec`, or None; why none where its name is a preset's with
    figures but its wafer is not that preset's)."""
    pub = PUBLISHED.get(spec.name)
    if not pub:
        return None, ""
    preset = PRESETS[spec.name]
    moved = [k for k in IDENTITY if getattr(spec, k) != getattr(preset, k)]
    if not moved:
        return pub, ""
    return None, (
        f"none compared: this spec is named {spec.name} but its {', '.join(moved)} "
        f"differ{'s' * (len(moved) == 1)} from the {spec.name} preset's, so Cerebras's "
        f"{spec.name} figures are not its"
    )


def published_totals(spec: WaferSpec) -> dict[str, dict[str, Any]]:
    """The model's whole-wafer totals of `spec` (keys sram_bytes, sram_bytes_per_s,
    fabric_bytes_per_s), each {value, unit, counted: what it counts}; for a preset with
    published figures (`PUBLISHED`, by the spec's name) also `published` (same unit),
    `published_as` (Cerebras's words), `ratio` (ours / published) and `gap` (a line on why
    they differ, the arithmetic that reproduces Cerebras's figure where one is known)."""
    pes, ghz = spec.num_pes, spec.clock_hz / 1e9
    rw = spec.sram_read_bytes_per_cycle + spec.sram_write_bytes_per_cycle
    links = f"4 links x {spec.link_bytes_per_cycle:g} B"
    out = {
        "sram_bytes": _total(
            spec.sram_total_bytes, "B", f"{pes:,} PEs x {spec.sram_bytes_per_pe:,} B"
        ),
        "sram_bytes_per_s": _total(
            spec.sram_bytes_per_s,
            "B/s",
            (
                f"{pes:,} PEs x ({spec.sram_read_bytes_per_cycle:g} B read + "
                f"{spec.sram_write_bytes_per_cycle:g} B write) a cycle x {ghz:.3g} GHz"
            ),
        ),
        "fabric_bytes_per_s": _total(
            spec.fabric_bytes_per_s,
            "B/s",
            (
                f"{pes:,} PEs x {links} a cycle x {ghz:.3g} GHz: the words each PE sends on its "
                "N, S, E, W links (each link between neighbours once a direction, the edge's as "
                "if linked; not the link to its own core)"
            ),
        ),
    }
    pub, why = _published_for(spec)
    if not pub:
        for total in out.values():
            if why:
                total["published_note"] = why
        return out
    cores = int(pub["cores"])
    sram_ghz = pub["sram_bytes_per_s"] / (cores * rw) / 1e9  # the clock its SRAM total implies
    _compare(
        out["sram_bytes"],
        pub["sram_bytes"],
        f"{pub['sram_bytes'] / 1e9:g} GB",
        (
            f"it is {cores:,} cores x {pub['sram_bytes'] / cores:,.0f} B (ours {pes:,} PEs "
            f"x {spec.sram_bytes_per_pe:,} B)"
        ),
    )
    _compare(
        out["sram_bytes_per_s"],
        pub["sram_bytes_per_s"],
        f"{pub['sram_bytes_per_s'] / 1e15:g} PB/s",
        (
            f"it is {cores:,} cores x {rw:g} B a cycle at {sram_ghz:.3g} GHz (ours {pes:,} PEs "
            f"at {ghz:.3g} GHz; {_INFERRED})"
        ),
    )
    if "fabric_bits_per_s" in pub:
        bits = pub["fabric_bits_per_s"]
        per_core = bits / 8 / (cores * sram_ghz * 1e9)
        both_ends = 8 * spec.link_bytes_per_cycle
        _compare(
            out["fabric_bytes_per_s"],
            bits / 8,
            f"{bits / 1e15:g} Pb/s",
            (
                f"at the {sram_ghz:.3g} GHz its SRAM total implies it is {per_core:.1f} B a "
                f"cycle for each of {cores:,} cores (ours {4 * spec.link_bytes_per_cycle:g} B); "
                f"a router's 4 links in and out, each link direction counted at both ends, are "
                f"{both_ends:g} B (inferred: Cerebras does not publish its accounting)"
            ),
        )
    return out


def _total(value: float, unit: str, counted: str) -> dict[str, Any]:
    return {"value": value, "unit": unit, "counted": counted}


def _compare(total: dict[str, Any], published: float, as_published: str, gap: str) -> None:
    ratio = total["value"] / published
    total.update(
        published=published,
        published_as=as_published,
        ratio=ratio,
        gap=gap,
        source="Cerebras (vendor figures; REFERENCES.md)",
    )
