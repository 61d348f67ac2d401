"""The soak's verdicts (`bench_soak.py`): the per-minute table (requests, TTFT p50/p99, RSS),
the summary JSON (outcomes, errors by kind, slots leaked after a wave, RSS growth over the
second half, the server's final metrics), the /health latency over all waves and while a
heavy hostile request was in flight, and bench/results/soak.json (soak_quick.json with
--quick).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from soak_traffic import HEAVY

RESULTS = Path(__file__).parent / "results"
GOOD = {"ok", "cancelled", "disconnected", "refused"}


def health_report(samples: list, records: list[dict]) -> dict:
    """/health latency (ms) over all samples, and over those taken while a heavy hostile
    request (a 5 MB prompt, a deep body) was in flight."""
    heavy = [(r["start"], r["end"]) for r in records if r["kind"].split(":")[-1] in HEAVY]
    hit = [any(a <= t <= b for a, b in heavy) for t, _, _ in samples]
    during = [lat for (_, lat, _), h in zip(samples, hit, strict=True) if h]
    outside = [lat for (_, lat, _), h in zip(samples, hit, strict=True) if not h]
    every = [lat for _, lat, _ in samples]
    return {
        "samples": len(every),
        "not_200": sum(status != 200 for *_, status in samples),
        "p50_ms": _ms(_pct(every, 50)),
        "p99_ms": _ms(_pct(every, 99)),
        "max_ms": _ms(max(every, default=None)),
        "during_heavy_hostile": {
            "samples": len(during),
            "heavy_requests": len(heavy),
            "p50_ms": _ms(_pct(during, 50)),
            "p99_ms": _ms(_pct(during, 99)),
            "max_ms": _ms(max(during, default=None)),
        },
        "outside_heavy_hostile": {  # the same waves, side by side: what the machine gives
            "samples": len(outside),
            "p50_ms": _ms(_pct(outside, 50)),
            "p99_ms": _ms(_pct(outside, 99)),
        },
    }


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"  # a run of one RSS sample has no first half


def _ms(s: float | None) -> float | None:
    return None if s is None else round(1e3 * s, 2)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def per_minute(records: list[dict], rss: list, t0: float, minutes: int) -> list[dict]:
    rows = []
    for m in range(minutes + 1):
        lo, hi = 60 * m, 60 * (m + 1)
        recs = [r for r in records if lo <= r["start"] - t0 < hi]
        if not recs:
            continue
        ttft = [r["ttft_s"] for r in recs if r["ttft_s"] is not None]
        mem = [b for t, b in rss if lo <= t < hi]
        rows.append(
            {
                "minute": m,
                "requests": len(recs),
                "ttft_p50_s": _pct(ttft, 50),
                "ttft_p99_s": _pct(ttft, 99),
                "rss_max_mib": max(mem) / 2**20 if mem else None,
                "errors": sum(r["outcome"] not in GOOD for r in recs),
            }
        )
    return rows


def report(args, minutes, model_dir, startup_s, records, waves, rss, t0, final, proc) -> dict:
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    errors = {k: v for k, v in outcomes.items() if k not in GOOD}
    rows = per_minute(records, rss, t0, int(minutes) + 1)
    mem = [b for _, b in rss]
    half = [b for t, b in rss if t >= rss[-1][0] / 2] if rss else []
    first_half = [b for t, b in rss if t < rss[-1][0] / 2] if rss else []
    slope = None
    if len(half) > 2:  # MiB per minute over the second half
        ts = np.array([t for t, _ in rss if t >= rss[-1][0] / 2]) / 60
        slope = float(np.polyfit(ts, np.array(half) / 2**20, 1)[0])
    summary = {
        "model_dir": str(model_dir),
        "minutes": minutes,
        "server_startup_s": startup_s,
        "requests": len(records),
        "waves": len(waves),
        "outcomes": outcomes,
        "errors_by_kind": errors,
        "every_request_ended": all(r["outcome"] is not None for r in records),
        "slots_leaked_after_any_wave": max((w["running_after_settle"] for w in waves), default=0),
        "max_settle_s": max((w["settle_s"] for w in waves), default=0.0),
        "rss_mib": {
            "first": mem[0] / 2**20 if mem else None,
            "max": max(mem) / 2**20 if mem else None,
            "last": mem[-1] / 2**20 if mem else None,
            "first_half_max": max(first_half) / 2**20 if first_half else None,
            "second_half_max": max(half) / 2**20 if half else None,
            "second_half_slope_mib_per_min": slope,
        },
        "per_minute": rows,
        "waves_detail": waves,
        "rss_samples": [(round(t, 1), b) for t, b in rss],
        "server_metrics_final": {
            k: v
            for k, v in final.items()
            if k.startswith(("wse_request_success", "wse_request_rejected", "wse_num_"))
        },
        "server_exit_code": proc.returncode,
        "cpu_count": os.cpu_count(),
    }
    print(f"\n{'min':>4} {'requests':>9} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} "
          f"{'RSS max MiB':>12} {'errors':>7}")  # fmt: skip
    for r in rows:
        p50 = "-" if r["ttft_p50_s"] is None else f"{r['ttft_p50_s'] * 1e3:.0f}"
        p99 = "-" if r["ttft_p99_s"] is None else f"{r['ttft_p99_s'] * 1e3:.0f}"
        rss_m = "-" if r["rss_max_mib"] is None else f"{r['rss_max_mib']:.0f}"
        print(f"{r['minute']:>4} {r['requests']:>9} {p50:>12} {p99:>12} {rss_m:>12} "
              f"{r['errors']:>7}")  # fmt: skip
    print(f"\n{len(records)} requests in {len(waves)} waves; outcomes {outcomes}")
    print(f"errors by kind: {errors or 'none'}")
    print(
        f"slots running after settling, worst wave: {summary['slots_leaked_after_any_wave']:.0f} "
        f"(settled within {summary['max_settle_s']:.1f} s)"
    )
    m = summary["rss_mib"]
    if m["first"] is not None:
        print(
            f"server RSS: first {m['first']:.0f} MiB, max {m['max']:.0f}, last {m['last']:.0f}; "
            f"max first half {_mib(m['first_half_max'])} vs second half "
            f"{_mib(m['second_half_max'])}"
            + (f"; slope over the second half {slope:+.2f} MiB/min" if slope is not None else "")
        )
    return summary


def write(args, summary: dict, health: dict, records: list[dict]) -> None:
    hostile: dict[str, dict[str, int]] = {}
    for r in records:
        if r["kind"].startswith("hostile:"):
            by = hostile.setdefault(r["kind"].split(":")[1], {})
            by[r["outcome"]] = by.get(r["outcome"], 0) + 1
    summary.update(
        health=health,
        hostile_outcomes=hostile,
        http_5xx=sum(str(r["outcome"]).startswith("http_5") for r in records),
        load_average=os.getloadavg(),
    )
    d = health["during_heavy_hostile"]
    print(
        f"/health: {health['samples']} probes, p50 {health['p50_ms']} ms, p99 "
        f"{health['p99_ms']} ms, max {health['max_ms']} ms, {health['not_200']} not 200; while "
        f"a 5 MB prompt or a deep body was refused ({d['heavy_requests']} of them): "
        f"{d['samples']} probes, p50 {d['p50_ms']} ms, p99 {d['p99_ms']} ms, max {d['max_ms']} ms"
        f"; at the other moments of the waves p50 {health['outside_heavy_hostile']['p50_ms']} ms, "
        f"p99 {health['outside_heavy_hostile']['p99_ms']} ms"
    )
    print(f"hostile requests by kind: {hostile}; HTTP 5xx: {summary['http_5xx']}")
    print(f"load average (1, 5, 15 min): {summary['load_average']}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "soak_quick.json" if args.quick else "soak.json"
    from wse_core.host.memory import host_record

    summary["host"] = host_record()  # bandwidth, load average, CPUs, machine, time
    (RESULTS / name).write_text(json.dumps(summary, indent=2))
    print(f"wrote {RESULTS / name}")
