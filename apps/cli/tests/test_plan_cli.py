"""`wse plan train|infer` on every shipped model config and an HF directory; bad input; the
tco-training experiment and the demo part."""

import json

import pytest
import wse_models
from typer.testing import CliRunner
from wse_cli.app import app
from wse_core import economics as eco
from wse_core import gpu as gpum
from wse_trainer.config import SHIPPED

runner = CliRunner()
MODELS = [*SHIPPED, *wse_models.PRESETS]


def _json(args):
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.mark.parametrize("model", MODELS)
def test_plan_train_on_every_shipped_model(model):
    d = _json(["plan", "train", "--model", model, "--tokens", "1e9"])
    w, g = d["wafer"], d["gpu"]
    assert d["workload"] == "train" and w["time_s"] > 0 and g["time_s"] > 0
    # the GPU side is steps x step time, energy its units x node power per GPU x time
    assert g["time_s"] == pytest.approx(g["steps"] * g["step_s"])
    assert g["energy_j"] == pytest.approx(g["units"] * gpum.H100.power_w_per_gpu()[0] * g["time_s"])
    assert w["energy_j"] == pytest.approx(w["units"] * eco.system_power_w("wse3")[0] * w["time_s"])
    hours = g["units"] * g["time_s"] / 3600
    assert g["cost_usd"]["hardware_usd"] == pytest.approx(hours * gpum.H100.usd_per_gpu_hour)
    assert d["gpus_to_match"] is None or d["gpus_to_match"] >= 1


@pytest.mark.parametrize("model", MODELS)
def test_plan_infer_on_every_shipped_model(model):
    d = _json(["plan", "infer", "--model", model])
    w, g = d["wafer"], d["gpu"]
    assert w["tokens_per_s_per_user"] > 0 and g["tokens_per_s_per_user"] > 0
    assert w["ttft_s"] > 1 / w["tokens_per_s_per_user"] * 0.999
    for side in (w, g):
        per_token = side["energy_j"] / (d["inputs"]["tokens_per_day"] * d["inputs"]["days"])
        assert side["energy_kwh_per_million_tokens"] == pytest.approx(per_token * 1e6 / 3.6e6)


def test_plan_on_an_hf_directory(tmp_path):
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    d = _json(["plan", "train", "--model", str(tmp_path), "--tokens", "1e10"])
    assert d["n_params"] == pytest.approx(1.1e9, rel=0.01)  # TinyLlama's shape
    assert d["inputs"]["seq_len"] == 2048
    d = _json(["plan", "infer", "--model", str(tmp_path / "config.json"), "--gpus", "1"])
    assert d["gpu"]["tp"] == 1


def test_plan_table_and_png(tmp_path):
    png = tmp_path / "plan.png"
    r = runner.invoke(app, ["plan", "infer", "--model", "llama3-8b", "--png", str(png)])
    assert r.exit_code == 0, r.output
    assert "tokens/s per user" in r.output and "GPUs to match" in r.output
    assert png.stat().st_size > 1000


def test_tokens_per_day_sizes_replicas_and_idle():
    one = _json(["plan", "infer", "--model", "llama3-8b", "--wafers", "1"])
    rate = one["wafer"]["tokens_per_s_per_user"]
    half = _json(["plan", "infer", "--model", "llama3-8b", "--wafers", "1",
                  "--tokens-per-day", str(rate * 86400 / 2)])  # fmt: skip
    w = half["wafer"]
    assert w["replicas"] == 1 and w["busy_fraction"] == pytest.approx(0.5)
    peak, idle = eco.system_power_w("wse3")
    per_day = (peak + idle) / 2 * 86400  # busy half the day at peak, idle the other half
    assert w["energy_j"] == pytest.approx(per_day * half["inputs"]["days"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["plan", "train", "--model", "llama3-8c", "--tokens", "1e9"], "did you mean 'llama3-8b'"),
        (["plan", "train", "--model", "llama3-8b", "--tokens", "-5"], "--tokens must be a finite"),
        (["plan", "train", "--model", "llama3-70b", "--tokens", "1e9", "--gpus", "2"],
         "use at least"),
        (["plan", "infer", "--model", "llama3-70b", "--gpus", "1"], "use at least"),
        (["plan", "infer", "--model", "llama3-8b", "--gpu", "h200"], "unknown GPU"),
        (["plan", "infer", "--model", "llama3-8b", "--wafer", "small"], "known systems"),
    ],
)  # fmt: skip
def test_plan_bad_input_is_exit_2_with_one_line(args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_tco_training_writes_its_files(tmp_path):
    r = runner.invoke(
        app, ["experiments", "run", "tco-training", "--quick", "--out", str(tmp_path)]
    )
    assert r.exit_code == 0, r.output
    out = tmp_path / "tco-training"
    for name in ("results.json", "table.md", "table.csv", "figure.png"):
        assert (out / name).stat().st_size > 0
    d = json.loads((out / "results.json").read_text())
    assert d["config"]["model"]["n_params"] == pytest.approx(12.3e9, rel=0.02)
    assert {p["name"] for p in d["predictions"]} >= {"time_to_train_days", "cost_usd"}


def test_demo_part_is_short(tmp_path):
    from rich.console import Console
    from wse_cli.commands.plan import part

    console = Console(record=True)
    part(console, out_dir=tmp_path, quick=True)
    text = console.export_text()
    assert "tokens/s" in text and "GPUs to match" in text
    assert (tmp_path / "plan_infer.png").exists()
