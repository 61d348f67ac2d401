"""Hunt 75d: a serving frontier of one output token (no per-user speed) on its chart, its
knee and its Pareto set.

Before: the chart dropped every point without a per-user speed and log-scaled empty axes
(matplotlib: "Data cannot be log-scaled because all values are <= 0"), in `wse plan infer
--png` and a notebook's `frontier(...)._repr_html_()`; the knee maximised a flat output and
took a queued plateau load by a float tie (Llama 3 8B on a CS-3, 1,024 + 1 tokens: 36 users,
a first token in 308 ms of which 79 ms waiting to be admitted); `Frontier.pareto` gave every
point an infinite speed and kept one point whatever its first token. Oracles: the chart's
own data read back from matplotlib against the frontier's points; a brute-force dominance
check over (output, first token) of every point priced; `queued` from the point's wait.
"""

from __future__ import annotations

import math

import matplotlib
import pytest
import wse_models
from wse_core import preset
from wse_systems import gpu as gpum
from wse_systems.serving import GpuServing, WaferServing, Workload, frontier, knee
from wse_systems.transformer import DecoderCounts

matplotlib.use("Agg")

ONE = Workload(prompt_tokens=1024, output_tokens=1)
TOY = DecoderCounts(name="toy", arch="llama", n_layers=4, d_model=256, n_heads=4, n_kv_heads=2,
                    d_ff=512, vocab_size=1000, max_seq_len=2048)  # fmt: skip


def _systems():
    llama = wse_models.preset_config("llama3-8b")
    return {
        "gpu": lambda: GpuServing(llama, gpum.H100, num_gpus=8, workload=ONE),
        "wafer": lambda: WaferServing(TOY, preset("small"), num_wafers=1,
                                      workload=Workload(prompt_tokens=64, output_tokens=1)),
    }  # fmt: skip


def _dominated(p, others) -> bool:
    """Whether some point serves at least as much output with a first token at least as
    soon, and is better in one (the brute-force oracle)."""
    return any(
        q.aggregate_tokens_per_s >= p.aggregate_tokens_per_s and q.ttft_s <= p.ttft_s
        and (q.aggregate_tokens_per_s > p.aggregate_tokens_per_s or q.ttft_s < p.ttft_s)
        for q in others
    )  # fmt: skip


def test_the_notebook_view_draws_output_against_first_token():
    front = frontier(_systems()["gpu"]())
    html = front._repr_html_()  # raised before: log scale of empty axes
    assert "<img" in html or "<svg" in html
    fig = front.plot()
    ax = fig.axes[0]
    assert "first token" in ax.get_xlabel()
    xs, ys = ax.lines[0].get_data()
    pts = sorted(front.points, key=lambda p: p.users)
    assert list(xs) == [p.ttft_s for p in pts]
    assert list(ys) == [p.aggregate_tokens_per_s for p in pts]


@pytest.mark.parametrize("side", ["gpu", "wafer"])
def test_the_knee_is_undominated_and_soonest_within_1pct(side):
    system = _systems()[side]()
    front = frontier(system)
    k = knee(system, front)
    # every load the system has (small enough here to price them all), not only the samples
    every = [system.point(u) for u in range(1, system.max_users + 1)] if system.max_users <= 600 \
        else list(front.points)  # fmt: skip
    assert not _dominated(k, every)
    # none serves more than 1% more output (a queued load's first token holds its wait), and
    # of those within 1% of the most, none has a sooner first token
    most = max(p.aggregate_tokens_per_s for p in every)
    assert k.aggregate_tokens_per_s >= 0.99 * most
    tied = [p for p in every if p.aggregate_tokens_per_s >= 0.99 * most]
    assert k.ttft_s <= min(p.ttft_s for p in tied)
    assert k.users in {p.users for p in frontier(system, (k.users,)).pareto()}


@pytest.mark.parametrize("side", ["gpu", "wafer"])
def test_pareto_at_one_token_is_output_against_first_token(side):
    front = frontier(_systems()[side]())
    pareto = front.pareto()
    kept = {p.users for p in pareto}
    for p in front.points:  # kept exactly when no point dominates it (brute force)
        assert (p.users in kept) == (not _dominated(p, front.points)), p.users
    assert len(pareto) >= 2 or len(front.points) == 1
    assert all(math.isfinite(p.ttft_s) for p in pareto)
