"""Hunt 68 (predict4), `wse plan train`'s numerics. Broken before: an fp32 config (model.dtype
float32) was priced on the wafer in fp32 and on the GPUs in bf16, and neither the table nor
the JSON said which precision the wafer ran (GPT-2 124M: wafer 1114.8 s against a bf16 GPU
job of 270 s, "2 GPUs to match"); a param_dtype bfloat16 config was priced as "bf16" though
`wse train` runs it as mixed (fp32 masters in MemoryX).

Oracles: `wse train --validate-only`'s own label for the same config, NVIDIA's H100 datasheet
peaks (FP32 67 TFLOP/s on the CUDA cores, bf16 989 dense), and the default plan's figures
before the change (mixed precision, which was right: they must not move)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import invoke

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
CONFIGS = Path(__file__).parents[3] / "packages/trainer/src/wse_trainer/configs"
WIDE = {"COLUMNS": "400"}  # one table row a line


def _ok(args: list) -> str:
    code, out = invoke(ROOT, args, WIDE)
    assert code == 0, out[-2000:]
    return out


def _label(params: Path) -> str:
    """The precision `wse train --validate-only` prints: "predicted on 1 x small (fp32)"."""
    out = _ok(["train", params, "--validate-only"])
    return re.search(r"predicted on \d+ x \S+ \((\w+)\)", out).group(1)


def _plan(params: Path, *more: str) -> dict:
    return json.loads(_ok(["plan", "train", "-m", params, "--tokens", "1e9", "--json", *more]))


def _variant(tmp_path: Path, **model: str) -> Path:
    d = yaml.safe_load((CONFIGS / "tiny.yaml").read_text())
    d["model"].update(model)
    path = tmp_path / "tiny_variant.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


@pytest.mark.parametrize(
    ("model", "wafer", "gpu", "peak"),
    [({}, "fp32", "fp32", 67e12),  # tiny.yaml gives no dtype: fp32
     ({"dtype": "bfloat16", "param_dtype": "bfloat16"}, "mixed", "bf16", 989e12)],
    ids=["fp32", "param_dtype_bfloat16"],
)  # fmt: skip
def test_the_plan_names_the_precision_the_run_has_on_both_sides(tmp_path, model, wafer, gpu,
                                                                 peak):  # fmt: skip
    params = _variant(tmp_path, **model)
    d = _plan(params)
    assert d["wafer"]["precision"] == _label(params) == wafer  # before: absent; "bf16"
    assert (d["gpu"]["precision"], d["gpu"]["peak_flops"]) == (gpu, peak)
    assert any(n.startswith(f"numerics: wafer {wafer} ") for n in d["assumptions"])
    table = _ok(["plan", "train", "-m", params, "--tokens", "1e9"])
    row = next(line for line in table.splitlines() if line.lstrip("│ ").startswith("precision"))
    assert re.search(rf"│\s+{wafer}\s+│\s+{gpu} \({peak / 1e12:g} TFLOP/s peak\)\s+│", row), row


def test_an_fp32_gpu_steps_compute_is_the_bf16_ones_scaled_by_the_peaks(tmp_path):
    """The same job (tiny: 8 data-parallel ranks, no bubble, the all-reduce hidden) at the
    fp32 peak takes 989 / 67 the compute of the bf16 one (H100 datasheet: 989 TFLOP/s dense
    bf16, 67 fp32). Hunt 76: both steps are tiny's kernel floor, which no precision moves, so
    the compute is what the peaks scale, and the steps are equal."""
    f32, bf = _plan(_variant(tmp_path)), _plan(_variant(tmp_path, dtype="bfloat16"))
    for d in (f32, bf):
        assert d["gpu"]["bubble_s"] == 0 and d["gpu"]["step_bound"] == "kernels"
    # review 81: tiny's parameters, far fewer than Megatron Core's 40M-parameter gradient
    # bucket, are one bucket, which starts when the backward ends: its ring is exposed,
    # the same fp32 gradients at either precision
    assert f32["gpu"]["exposed_allreduce_s"] == bf["gpu"]["exposed_allreduce_s"] > 0
    assert f32["gpu"]["compute_s"] == pytest.approx(bf["gpu"]["compute_s"] * 989 / 67, rel=1e-12)
    assert f32["gpu"]["step_s"] == bf["gpu"]["step_s"]


def test_the_default_gpt2_plan_does_not_move():
    d = _plan(CONFIGS / "gpt2_124m.yaml")  # model.dtype bfloat16, fp32 masters: mixed
    w, g = d["wafer"], d["gpu"]
    assert (w["precision"], g["precision"], g["peak_flops"]) == ("mixed", "bf16", 989e12)
    # the figures before hunt 68's change, which had this precision right; hunt 74: + the
    # tied embedding's gradient out and the file's clipping, which holds MemoryX's update to
    # the step's end (0.07682164338574195 before; 0.07795572338574194 before session 84's
    # CS-3 hop and relay latencies fitted on WaferLLM's MeshGEMV measured on a CS-3;
    # 0.07822476287525673 before issue 41's CS-3 DSD issue and control instruction, fitted on
    # the same rows)
    assert w["step_s"] == pytest.approx(0.07775107426779843, rel=1e-12)
    # hunt 80: compute-bound with the ring hidden, so it moves with the MFU alone, 0.4 -> 0.39;
    # review 81: all but the last gradient bucket (Megatron Core's 40M parameters, filled
    # from the last back), the word embeddings' half a GPU at dp 4 x tp 2, 50,257 x 768 / 2
    # fp32 gradients over NVLink, which start when the backward ends (dp 8 x tp 1 was taken)
    assert (g["layout"]["dp"], g["layout"]["tp"], g["layout"]["pp"]) == (4, 2, 1)
    bucket = 2 * 3 / 4 * 4 * 50257 * 768 / 2 / 450e9 + 2 * 3 * 1e-6
    assert g["exposed_allreduce_s"] == pytest.approx(bucket, rel=1e-12)
    assert g["step_s"] == pytest.approx(0.03096367265520728 * 0.4 / 0.39 + bucket, rel=1e-12)
    assert d["gpus_to_match"] == 4
