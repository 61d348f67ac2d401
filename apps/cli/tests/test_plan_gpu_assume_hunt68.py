"""Hunt 68, `--assume gpu.kernel_s=S` on the command line, and the `trtllm-h100` experiment's
kernel-cost sweep. Broken before:
- the GPU step's kernel cost (`wse_systems.serving.gpu_step.KERNEL_S`, assumed, swept
  0.5-5 us) was no `--assume` key while the wafer's assumed constants were: `wse plan infer
  --assume gpu.kernel_s=2e-6` was "unknown assumption", and so was `wse experiments run
  trtllm-h100 --assume ...` / `--sweep ...`. Now it moves every GPU figure of the command,
  is listed with the plan's assumptions (table and JSON), and is refused in one line outside
  [0, 1e-3] s or non-finite. `wse plan train` refused it while its GPU step had no kernel
  floor; since hunt 76 the floor is priced at it (`wse_systems.gpu_kernels`), and it moves
  a kernel-bound training step in proportion.
- `wse experiments run trtllm-h100` printed no table of `fit_over_floor()`, the sweep that
  shows the rows do not identify the kernel cost.

Oracles: `GpuServing` built in Python with `GpuFractions(kernel_s=2e-6)` (and the default's at
1 us), `trtllm_h100.predict(row, kernel_s=2e-6)`, `fit_over_floor()`, and the training
floor's kernels counted by hand from the counts the plan states."""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_models import preset_config
from wse_systems import gpu as gpum
from wse_systems.serving import GpuServing, Workload, at_users, frontier
from wse_systems.serving import gpu_step as gs
from wse_systems.serving import trtllm_h100 as tr

ROOT = typer.main.get_command(app)
INFER = ["plan", "infer", "-m", "tiny-llama", "--users", "4", "--prompt-tokens", "64",
         "--output-tokens", "32"]  # fmt: skip
WIDE = {"COLUMNS": "400"}  # one table row a line


def _run(args: list, env=None) -> str:
    code, out = invoke(ROOT, [str(a) for a in args], env)
    assert code == 0, out[-2000:]
    return out


def _oracle(kernel_s: float) -> GpuServing:
    fractions = gs.GpuFractions(gs.FITTED_HBM_FRACTION, gs.FITTED_MFU, kernel_s=kernel_s)
    work = Workload(prompt_tokens=64, output_tokens=32)
    return GpuServing(preset_config("tiny-llama"), gpum.H100, num_gpus=8, workload=work,
                      fractions=fractions)  # fmt: skip


def _gpu_figures(d: dict) -> list:
    p = d["gpu"]["point"]
    points = [[q["users"], q["user_tokens_per_s"], q["aggregate_tokens_per_s"], q["ttft_s"]]
              for q in d["frontiers"]["gpu"]["points"]]  # fmt: skip
    return [p["user_tokens_per_s"], p["aggregate_tokens_per_s"], p["ttft_s"], points]


def _python_figures(serve: GpuServing) -> list:
    p = at_users(serve, 4)
    points = [[q.users, q.user_tokens_per_s, q.aggregate_tokens_per_s, q.ttft_s]
              for q in frontier(serve).points]  # fmt: skip
    return [p.user_tokens_per_s, p.aggregate_tokens_per_s, p.ttft_s, points]


def test_the_assumed_kernel_cost_prices_every_gpu_figure_of_the_plan():
    assumed = json.loads(_run([*INFER, "--assume", "gpu.kernel_s=2e-6", "--json"]))
    assert _gpu_figures(assumed) == _python_figures(_oracle(2e-6))  # JSON's floats round-trip
    assert assumed["gpu"]["point"]["layout"]["kernel_s"] == 2e-6
    assert assumed["assume"] == {"gpu.kernel_s": 2e-6}
    (note,) = [a for a in assumed["assumptions"] if a.startswith("GPU step floor")]
    assert "40 us" in note and "kernel_s = 2 us" in note  # (8 x 2 layers + 4) x 2 us
    default = json.loads(_run([*INFER, "--json"]))  # unchanged: 1 us
    assert _gpu_figures(default) == _python_figures(_oracle(1e-6))
    assert _gpu_figures(default) != _gpu_figures(assumed)
    assert default["wafer"] == assumed["wafer"]  # a GPU constant moves no wafer figure
    table = _run([*INFER, "--assume", "gpu.kernel_s=2e-6"], WIDE)
    assert "- assumed (--assume): gpu.kernel_s=2e-06" in table
    assert "40 us a step: 20 kernels x 2 us" in table


BAD = [
    ("gpu.kernel_s=2e-3", "assumption gpu.kernel_s must be in [0, 0.001] s/kernel, got '2e-3'"),
    ("gpu.kernel_s=-1e-9", "assumption gpu.kernel_s must be in [0, 0.001] s/kernel"),
    ("gpu.kernel_s=inf", "assumption gpu.kernel_s must be a finite number, got 'inf'"),
    ("gpu.kernel_s=nan", "assumption gpu.kernel_s must be a finite number, got 'nan'"),
    ("gpu.kernel_s=", "assumption gpu.kernel_s must be a number, got ''"),
]


@pytest.mark.parametrize("item,message", BAD)
def test_a_bad_kernel_cost_is_refused_in_one_line_by_both_commands(tmp_path, item, message):
    theirs = refused_in_one_line(
        ROOT, ["experiments", "run", "trtllm-h100", "--out", tmp_path, "--assume", item], message
    )
    assert refused_in_one_line(ROOT, [*INFER, "--assume", item], message) == theirs
    assert not any(tmp_path.iterdir())  # refused before the run: nothing written


def _tiny_floor_s(kernel_s: float) -> float:
    """The shipped `tiny` params (4 layers, batch 16 of 128 tokens) on 8 H100s, dp 8, tp 1,
    pp 1, each rank's 2 sequences as one micro-batch of 2 (hunt 79: Megatron's
    --micro-batch-size, the fastest that fits, where one sequence was fixed: 2 micro-batches,
    284 kernels): a micro-batch runs 8 kernels a layer 4 times (forward, recompute, backward
    at two) and 4 around them 3 times; 1 AdamW kernel a layer a step."""
    micro, layers = 1, 4
    return (micro * (8 * 4 * layers + 4 * 3) + 1 * layers) * kernel_s  # 144 kernels


def _tiny_ring_s() -> float:
    """The shipped `tiny`'s gradient ring on 8 H100s, all of it after the backward (review 81:
    its 1,088,256 parameters are fewer than Megatron's 40M bucket, so the one bucket starts
    once the backward has ended): GPT-2's wte 2,048 x 128, wpe 256 x 128, 4 layers of qkv
    (128 x 384 + 384), proj (128 x 128 + 128), fc (128 x 512 + 512), fc out (512 x 128 + 128)
    and two norms (2 x 256), the final norm 256; fp32 gradients, a ring of 8 over NVLink (450
    GB/s a direction): 2 x 7/8 x 4 B x P / 450e9 + 2 x 7 x 1 us."""
    layer = (128 * 384 + 384) + (128 * 128 + 128) + (128 * 512 + 512) + (512 * 128 + 128) + 512
    params = 2048 * 128 + 256 * 128 + 4 * layer + 256
    assert params == 1_088_256
    return 2 * 7 / 8 * 4 * params / 450e9 + 2 * 7 * 1e-6  # 30.9 us


def test_plan_train_prices_its_kernel_floor_at_it():
    """Before hunt 76 refused ("prices its GPUs at --mfu, with no kernel floor")."""
    args = ["plan", "train", "-m", "tiny", "--tokens", "1e6", "--gpus", "8", "--json"]
    default = json.loads(_run(args))
    assumed = json.loads(_run([*args, "--assume", "gpu.kernel_s=2e-6"]))
    for d, k in ((default, 1e-6), (assumed, 2e-6)):
        g = d["gpu"]
        assert (g["layout"]["dp"], g["layout"]["tp"], g["layout"]["pp"]) == (8, 1, 1)
        assert g["layout"]["micro_batch"] == 2
        assert g["step_bound"] == "kernels" and g["compute_s"] < _tiny_floor_s(k)
        assert g["exposed_allreduce_s"] == pytest.approx(_tiny_ring_s(), rel=1e-12)
        step = _tiny_floor_s(k) + _tiny_ring_s()  # 144 us, 288 us of kernels, then the ring
        assert g["step_s"] == pytest.approx(step, rel=1e-12)
        assert g["train_s"] == pytest.approx(g["steps"] * step, rel=1e-12)
    assert assumed["gpu"]["step_s"] - default["gpu"]["step_s"] == pytest.approx(144e-6)
    assert assumed["gpu"]["compute_s"] == default["gpu"]["compute_s"]  # kernels move no flops
    assert assumed["wafer"] == default["wafer"]  # a GPU constant moves no wafer figure
    assert assumed["assume"] == {"gpu.kernel_s": 2e-6}
    (listed,) = [e for e in assumed["assumed"] if e["name"] == "gpu.kernel_s"]
    assert listed["value"] == 2e-6 and listed["assumed"] is True


def test_a_sweep_of_the_kernel_cost_reprices_the_rows(tmp_path):
    out = _run(["experiments", "run", "trtllm-h100", "--out", tmp_path,
                "--sweep", "gpu.kernel_s=1e-6,2e-6"], WIDE)  # fmt: skip
    lines = [x for x in out.splitlines() if x.startswith("| output_tokens_per_s")]
    assert len(lines) == len(tr.ROWS)
    for line, row in zip(lines, tr.ROWS, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        at = [tr.predict(row, mfu=gs.FITTED_MFU, hbm_fraction=gs.FITTED_HBM_FRACTION, kernel_s=k)
              for k in (1e-6, 2e-6)]  # fmt: skip
        assert cells[2] == f"{at[0]:.5g}" and cells[3].startswith(f"{at[1]:.5g} (")


def test_the_experiment_prints_fit_over_floor(tmp_path, monkeypatch):
    # the fit (16 s a sweep) as a cheap function of the kernel cost: what is checked is that
    # the printed table and results.json hold fit_over_floor()'s rows
    monkeypatch.setattr(tr, "fit", lambda k=None: (0.25 + 1e3 * k, 0.7 + 1e4 * k, 0.2 + k))
    out = _run(["experiments", "run", "trtllm-h100", "--out", tmp_path], WIDE)
    oracle = tr.fit_over_floor()
    head = next(x for x in out.splitlines() if x.startswith("| what |"))
    columns = [c.strip() for c in head.strip("|").split("|")]
    shown = [[c.strip() for c in x.strip("|").split("|")] for x in out.splitlines()
             if x.startswith("| fit at kernel_s |")]  # fmt: skip
    assert len(shown) == len(oracle) == 4  # before: no such rows
    fields = ("kernel_s", "mfu", "hbm_fraction", "rms_fitted", "rms_checks")
    for cells, row in zip(shown, oracle, strict=True):
        assert [cells[columns.index(k)] for k in fields] == [f"{row[k]:.6g}" for k in fields]
    data = json.loads((tmp_path / "trtllm-h100" / "results.json").read_text())
    rows = [m for m in data["measurements"] if m["what"] == "fit at kernel_s"]
    assert [{k: m[k] for k in fields} for m in rows] == oracle


def test_experiments_list_and_take_the_gpu_kernel_cost_as_plan_does():
    """`wse experiments assumptions` listed every wafer constant but not gpu.kernel_s, and
    `experiments run wafer-yield --assume gpu.kernel_s=...` called it unknown (the key was
    registered only where wse_systems.serving had been imported)."""
    out = _run(["experiments", "assumptions"], WIDE)
    line = next(x for x in out.splitlines() if x.startswith(gs.KERNEL_KEY))
    assert f"{gs.KERNEL_S:.4g}" in line and gs.KERNEL.line() in line
    refused_in_one_line(
        ROOT, ["experiments", "run", "wafer-yield", "--assume", "gpu.kernel_s=1"],
        "assumption gpu.kernel_s must be in [0, 0.001] s/kernel, got '1'",
    )  # fmt: skip
