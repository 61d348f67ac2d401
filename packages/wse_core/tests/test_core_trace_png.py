"""The per-PE view as a matplotlib Figure (`wse_core.trace.png`) and experiments' extra
figures: `write_experiment` writes `figure.png` and each extra figure as `<name>.png`."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from wse_core import Phase, RunReport, Work, preset, serial  # noqa: E402
from wse_core.hw.sram import Region  # noqa: E402
from wse_core.studies.experiment import ExperimentResult, PredictionRow, write_experiment  # noqa: E402
from wse_core.trace import trace_uniform  # noqa: E402
from wse_core.trace.fields import sram_capacity  # noqa: E402
from wse_core.trace.png import figure_png, trace_figure  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _trace():
    spec = preset("small")
    phases = serial(Phase("hop", Work(latency_hops=5)))
    report = RunReport.build("png test", spec, phases)
    return trace_uniform(spec, report, region=Region("grid", 0, 0, 4, 30))


def test_trace_figure_has_the_four_panels_and_the_given_title(tmp_path):
    fig = trace_figure(_trace(), title="my run")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    sram = f"SRAM in use\n{sram_capacity(_trace().meta)}"  # its capacity (hunt 82 L2)
    assert titles == [sram, "busy cycles", "link traffic N+S+E+W", "defects and regions"]
    assert fig._suptitle.get_text() == "my run"
    plt.close(fig)
    assert figure_png(_trace(), tmp_path / "v.png").read_bytes()[:8] == PNG


def test_write_experiment_writes_extra_figures_beside_figure_png(tmp_path):
    row = PredictionRow("x", 1.0, "s", {"wafer": "small"})
    main = plt.figure()
    extra = {"per_pe": trace_figure(_trace())}
    result = ExperimentResult("exp", 0, {}, [], [row], main, extra_figures=extra)
    folder = write_experiment(result, tmp_path)
    assert (folder / "figure.png").read_bytes()[:8] == PNG
    assert (folder / "per_pe.png").read_bytes()[:8] == PNG
    plain = write_experiment(ExperimentResult("plain", 0, {}, [], [row]), tmp_path)
    assert sorted(p.name for p in plain.iterdir()) == ["results.json", "table.csv", "table.md"]


def test_many_long_region_names_draw_few_short_labels():
    # hunt 55: 10,000 regions named with 1,000 characters each took 25 s to draw (200 labels
    # of 1,000 characters); now 40 labels of at most 24 and one collection of 200 outlines
    import dataclasses

    from wse_core.trace.png import LABEL_CHARS, MAX_LABELS

    trace = _trace()
    regions = [{"name": f"{i}" + "x" * 999, "rect": [0, i % 30, 4, 1]} for i in range(10_000)]
    many = dataclasses.replace(trace, regions=regions)
    fig = trace_figure(many)
    ax = fig.axes[3]
    assert len(ax.texts) == MAX_LABELS
    assert all(len(t.get_text()) <= LABEL_CHARS for t in ax.texts)
    assert len(ax.collections) == 1 and len(ax.collections[0].get_paths()) == 200
    plt.close(fig)
