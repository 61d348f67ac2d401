"""`wse plan train|infer` on every shipped model config and an HF directory; bad input; the
tco-training experiment and the demo part."""

import json

import pytest
import wse_models
from typer.testing import CliRunner
from wse_cli.app import app
from wse_core import preset
from wse_systems import economics as eco
from wse_systems import gpu as gpum
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
    assert d["workload"] == "train" and w["time_s"] > 0
    assert w["energy_j"] == pytest.approx(
        w["units"] * eco.system_power_w(preset("wse3"))[0] * w["time_s"]
    )
    if model == "llama_24t":  # no H100 layout holds it (below): the wafers alone
        assert g is None
        return
    assert g["time_s"] > 0
    # the GPU side is steps x step time, energy its units x node power per GPU x time
    assert g["time_s"] == pytest.approx(g["steps"] * g["step_s"])
    assert g["energy_j"] == pytest.approx(g["units"] * gpum.H100.power_w_per_gpu()[0] * g["time_s"])
    assert w["energy_j"] == pytest.approx(
        w["units"] * eco.system_power_w(preset("wse3"))[0] * w["time_s"]
    )
    hours = g["units"] * g["time_s"] / 3600
    assert g["cost_usd"]["hardware_usd"] == pytest.approx(hours * gpum.H100.usd_per_gpu_hour)
    assert d["gpus_to_match"] is None or d["gpus_to_match"] >= 1
    if g["time_s"] <= w["time_s"]:  # the priced GPUs are already as fast: never match above
        assert d["gpus_to_match"] is not None and d["gpus_to_match"] <= g["units"]


def test_gpus_to_match_training_never_exceeds_a_faster_priced_count():
    # tco-training's 12B on one CS-3: 16 H100 are faster than the wafer (8 were, before the
    # wafer's step micro-batched: 79 days against 113; now 79 against 67); the search used to
    # start at the memory minimum (3), double past the priced count and answer more than it
    from wse_core import preset
    from wse_systems.planning.choice import ModelChoice
    from wse_systems.planning.train import TrainGpus, plan_train
    from wse_trainer.studies.tco_training import model_12b

    plan = plan_train(ModelChoice("llama-12b", model_12b(), seq_len=8192), tokens=2.4e11,
                      systems=1, gpus=TrainGpus(gpus=16), spec=preset("wse3"))  # fmt: skip
    assert plan.gpu.time_s < plan.wafer.time_s
    assert plan.gpus_to_match is not None and plan.gpus_to_match <= 16


def test_match_gpus_search_by_hand():
    from wse_systems.planning.train import match_gpus

    times = {3: 9.0, 4: 6.0, 5: 7.0, 6: 9.0, 7: 9.0, 8: 4.0, 16: 3.0, 24: 2.5, 32: 1.0}
    fn, counts = times.get, sorted(times)  # the counts with a layout (hunt 78)
    assert match_gpus(fn, 6.5, counts=counts, node=8) == 4
    assert match_gpus(fn, 3.5, counts=counts, node=8) == 16  # past a node: whole nodes
    assert match_gpus(fn, 0.5, counts=counts, node=8) is None
    # hunt 78: every count tried, whatever was priced (the doubling 8, 16, 32 missed 24)
    assert match_gpus(fn, 2.6, counts=counts, node=8) == 24
    twelve = {**times, 12: 2.0}  # 12 is fast enough but not whole nodes: skipped
    assert match_gpus(twelve.get, 2.6, counts=sorted(twelve), node=8) == 24


def _wafer_period(side: dict, output: int, seen_s: float) -> None:
    """The wafer's request (hunt 73): its least first token and output window fill the
    period, which paces the throughput; the first token shown (`ttft_s`, a bound on the mean
    over the users' phases) and the output window (a bound) give a longer view, `seen_s`."""
    lay = side["point"]["layout"]
    period = lay["request_period_s"]
    assert side["tokens_per_s"] == pytest.approx(side["users"] * output / period)
    assert lay["ttft_least_s"] + lay["decode_s"] == pytest.approx(period)
    assert lay["ttft_least_s"] <= side["ttft_s"] * (1 + 1e-12)
    assert "conservative" in lay["ttft_bound"]
    assert side["users"] * output / seen_s <= side["tokens_per_s"] * (1 + 1e-9)
    if side["users"] == 1:
        assert seen_s == pytest.approx(period)


# llama_24t does not fit the pipelined inference planner's 512 wafers: refused below.
@pytest.mark.parametrize("model", [m for m in MODELS if m != "llama_24t"])
def test_plan_infer_on_every_shipped_model(model):
    d = _json(["plan", "infer", "--model", model])
    w, g = d["wafer"], d["gpu"]
    assert d["choice"] == "knee"
    for side, front in ((w, d["frontiers"]["wafer"]), (g, d["frontiers"]["gpu"])):
        assert side["tokens_per_s_per_user"] > 0 and side["users"] >= 1
        # each request, on both systems (hunt 66: the GPUs left the first token out): its
        # first token, then its output at the per-user speed
        o = d["inputs"]["workload"]["output_tokens"]
        # the O - 1 tokens after the first at that speed (hunt 75: O)
        period = side["ttft_s"] + (o - 1) / side["tokens_per_s_per_user"]
        if side is g:
            assert side["tokens_per_s"] == pytest.approx(side["users"] * o / period)
        else:  # hunt 73: the wafer's first token and per-user speed are both conservative
            _wafer_period(side, o, period)
        assert side["users"] <= side["max_users"] == front["max_users"]
        per_token = side["energy_j"] / (d["inputs"]["tokens_per_day"] * d["inputs"]["days"])
        assert side["energy_kwh_per_million_tokens"] == pytest.approx(per_token * 1e6 / 3.6e6)
        # the knee: per-user speed x aggregate throughput no lower than at any sampled load
        score = side["tokens_per_s_per_user"] * side["tokens_per_s"]
        for p in front["points"]:
            assert score >= p["user_tokens_per_s"] * p["aggregate_tokens_per_s"] * (1 - 1e-9)
    assert w["ttft_s"] > 1 / w["tokens_per_s_per_user"] * 0.999


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
    assert "frontiers of" in r.output and "*" in r.output
    assert png.stat().st_size > 1000


def test_tokens_per_day_sizes_replicas_and_idle():
    one = _json(["plan", "infer", "--model", "llama3-8b", "--wafers", "1", "--users", "4"])
    rate = one["wafer"]["tokens_per_s"]
    half = _json(["plan", "infer", "--model", "llama3-8b", "--wafers", "1", "--users", "4",
                  "--tokens-per-day", str(rate * 86400 / 2)])  # fmt: skip
    w = half["wafer"]
    assert w["replicas"] == 1 and w["busy_fraction"] == pytest.approx(0.5)
    peak, idle = eco.system_power_w(preset("wse3"))
    per_day = (peak + idle) / 2 * 86400  # busy half the day at peak, idle the other half
    assert w["energy_j"] == pytest.approx(per_day * half["inputs"]["days"])


def test_plan_infer_at_a_number_of_users():
    d = _json(["plan", "infer", "--model", "llama3-70b", "--users", "8",
               "--prompt-tokens", "128", "--output-tokens", "20"])  # fmt: skip
    w, g = d["wafer"], d["gpu"]
    assert d["choice"] == "users" and w["users"] == g["users"] == 8
    # 8 users do not fill the 4 wafers' pipeline, but the 7 others' prompt blocks stall each
    # user's tokens (hunt 66: every user ran at the one-user speed)
    one = _json(["plan", "infer", "--model", "llama3-70b", "--users", "1",
                 "--prompt-tokens", "128", "--output-tokens", "20"])  # fmt: skip
    assert w["bound"] == "pipeline latency"
    assert w["tokens_per_s_per_user"] < one["wafer"]["tokens_per_s_per_user"]
    lay = w["point"]["layout"]
    assert 19 / w["tokens_per_s_per_user"] == pytest.approx(
        lay["decode_alone_s"] + lay["decode_stalls_s"])  # fmt: skip
    # a request: the prompt's pass (its least first token and the first of 20), then 19
    # tokens at the per-user speed (hunt 75: 20); the first token shown is a bound (hunt 73),
    # so the user's view spans more
    _wafer_period(w, 20, w["ttft_s"] + 19 / w["tokens_per_s_per_user"])
    assert lay["ttft_least_s"] == pytest.approx(lay["prompt_pass_s"])  # latency-bound
    assert g["tokens_per_s_per_user"] < one["gpu"]["tokens_per_s_per_user"]  # a batch of 8


def test_plan_infer_at_a_per_user_speed():
    d = _json(["plan", "infer", "--model", "llama3-8b", "--min-user-tokens-per-s", "300",
               "--prompt-tokens", "128", "--output-tokens", "20"])  # fmt: skip
    for side in (d["wafer"], d["gpu"]):
        assert side["meets_speed"] and side["tokens_per_s_per_user"] >= 300
    more = _json(["plan", "infer", "--model", "llama3-8b", "--prompt-tokens", "128",
                  "--output-tokens", "20", "--users", str(d["gpu"]["users"] + 1)])  # fmt: skip
    # hunt 76: the most output within 1%, then the soonest first token (it was the largest
    # load that meets it): a load that meets it serves at most 1/0.99 of the chosen output
    m = more["gpu"]
    if m["tokens_per_s_per_user"] >= 300 and m["point"]["layout"]["admission_wait_s"] == 0:
        assert m["tokens_per_s"] <= d["gpu"]["tokens_per_s"] / 0.99
    fast = _json(["plan", "infer", "--model", "llama3-8b", "--min-user-tokens-per-s", "1000"])
    assert fast["wafer"]["meets_speed"] and not fast["gpu"]["meets_speed"]
    assert fast["gpu"]["users"] == 1


def test_plan_infer_with_a_draft_model():
    plain = _json(["plan", "infer", "--model", "llama3-70b", "--users", "1"])
    spec = _json(["plan", "infer", "--model", "llama3-70b", "--users", "1", "--draft",
                  "llama3-1b", "--gamma", "4", "--alpha", "0.8"])  # fmt: skip
    assert spec["inputs"]["speculation"]["tokens_per_round"] == pytest.approx(3.3616)
    assert spec["gpu"]["tokens_per_s_per_user"] > plain["gpu"]["tokens_per_s_per_user"]
    assert spec["wafer"]["max_users"] < plain["wafer"]["max_users"]  # the draft's SRAM
    # the wafer's gain, kept apart (`test_plan_infer_draft_speeds_the_wafer`): within 1%
    assert spec["wafer"]["tokens_per_s_per_user"] > 0.99 * plain["wafer"]["tokens_per_s_per_user"]


@pytest.mark.xfail(
    strict=True,
    reason="session 86: with the decode's norms, final norm, argmax and RoPE priced, "
    "llama3-70b on 4 CS-3 with a llama3-1b draft (gamma 4, alpha 0.8) prices 678.3 tokens/s "
    "a user against 679.2 without it: the draft's 22 rows a wafer leave the target 740 of "
    "762, where compact holds no load, so the target runs banded (a token alone 2.31 ms "
    "against compact's 1.47 ms on the whole wafer) and 3.36 tokens a round only make up "
    "for it. The planner should say that speculation does not pay here rather than price "
    "it; not yet done",
)
def test_plan_infer_draft_speeds_the_wafer():
    plain = _json(["plan", "infer", "--model", "llama3-70b", "--users", "1"])
    spec = _json(["plan", "infer", "--model", "llama3-70b", "--users", "1", "--draft",
                  "llama3-1b", "--gamma", "4", "--alpha", "0.8"])  # fmt: skip
    assert spec["wafer"]["tokens_per_s_per_user"] > plain["wafer"]["tokens_per_s_per_user"]


def test_plan_infer_names_a_draft_given_as_an_hf_folder(tmp_path):
    # hunt 62: an HF folder's config has no name, and the plan said "draft ModelConfig"
    from wse_inference.testing import save_tiny_model

    draft = tmp_path / "my-draft"
    save_tiny_model(draft, n_layers=1, vocab_size=128256)  # Llama 3's vocabulary
    # a request within the draft's 128 positions (a longer one is refused: a draft reads it)
    spec = _json(["plan", "infer", "--model", "llama3-8b", "--users", "1", "--draft",
                  str(draft), "--alpha", "0.8", "--prompt-tokens", "100",
                  "--output-tokens", "28"])  # fmt: skip
    assert spec["inputs"]["speculation"]["draft"] == str(draft)


@pytest.mark.parametrize(
    "args, message",
    [
        (["plan", "train", "--model", "llama3-8c", "--tokens", "1e9"], "did you mean 'llama3-8b'"),
        (["plan", "train", "--model", "llama3-8b", "--tokens", "-5"], "--tokens must be a finite"),
        (["plan", "train", "--model", "llama3-70b", "--tokens", "1e9", "--gpus", "2"],
         "use at least"),
        (["plan", "infer", "--model", "llama3-70b", "--gpus", "1"], "use at least"),
        (["plan", "infer", "--model", "llama3-8b", "--gpu", "h200"], "unknown GPU"),
        (["plan", "infer", "--model", "llama3-8b", "--wafer", "small"], "part of no system"),
        (["plan", "infer", "--model", "llama3-8b", "--users", "0"], "--users must be an integer"),
        (["plan", "infer", "--model", "llama3-70b", "--users", "100000"], "do not fit"),
        (["plan", "infer", "--model", "llama3-8b", "--min-user-tokens-per-s", "1e6"],
         "no system meets"),
        (["plan", "infer", "--model", "llama3-8b", "--min-user-tokens-per-s", "nan"],
         "must be a finite number in (0, "),
        (["plan", "infer", "--model", "llama3-8b", "--users", "2", "--min-user-tokens-per-s",
          "10"], "not both"),
        (["plan", "infer", "--model", "llama3-8b", "--usd-per-gpu-hour", "nan"], "in [0, "),
        (["plan", "infer", "--model", "llama3-8b", "--usd-per-system-hour", "-1"], "in [0, "),
        (["plan", "train", "--model", "llama3-8b", "--tokens", "1e9", "--usd-per-kwh", "-0.1"],
         "in [0, 100]"),
        (["plan", "infer", "--model", "llama3-8b", "--draft", "llama3-1b"], "needs --alpha"),
        (["plan", "infer", "--model", "llama3-8b", "--draft", "llama3-1b", "--alpha", "1.5"],
         "--alpha must be a finite number in [0, 1], got 1.5"),
        (["plan", "infer", "--model", "llama3-8b", "--draft", "gpt2-124m", "--alpha", "0.8"],
         "--draft gpt2-124m has a vocabulary of 50,257 tokens, the model llama3-8b 128,256"),
        (["plan", "infer", "--model", "llama3-8b", "--output-tokens", "0"], "--output-tokens must"),
        (["plan", "infer", "--model", "llama_24t"], "up to 512 holds the model"),
        (["plan", "infer", "--model", "llama3-8b", "--gemv", "tree"],
         "known GEMV programs are sdk, meshgemv"),
        (["plan", "train", "--model", "llama_1t", "--tokens", "1e9", "--systems", "0"],
         "--systems must be an integer >= 1, got 0"),
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

    console = Console(record=True, width=200)
    part(console, out_dir=tmp_path, quick=True)
    text = console.export_text()
    assert "tokens/s" in text and "GPUs to match" in text
    assert "at the knee" in text and "batch 1" not in text
    assert (tmp_path / "plan_infer.png").exists()


def test_plan_train_a_trillion_parameters_from_1_to_2048_systems():
    # the 1T config's batch_size (64 sequences of 4096) is global: N systems run 64 / N each
    # as micro-batches; speedups against one system (weak: the same per-system batch,
    # strong: the same global batch), never above N; at 64 systems one sequence each cannot
    # hide the weight stream: strong scaling loses (no > 0.99 lock)
    # hunt 72: unset, the micro-batch is auto (wse train's), below one system's fastest
    # (0.91x at one system); these figures are the fastest micro-batch's, asked for
    rows = {n: _json(["plan", "train", "--model", "llama_1t", "--tokens", "1e12",
                      "--systems", str(n), "--micro-batch", "explore"])
            for n in (1, 16, 64)}  # fmt: skip
    one = rows[1]["wafer"]
    assert one["weak_speedup"] == one["strong_speedup"] == 1.0 and one["swarmx_levels"] == 0
    for n, d in rows.items():
        w, per = d["wafer"], 64 // n
        assert d["inputs"]["batch_per_system"] == per and d["inputs"]["global_batch"] == 64
        assert w["micro_batches"] * w["micro_batch"] == per
        assert w["tokens_per_s"] == pytest.approx(n * per * 4096 / w["step_s"])
        assert w["strong_speedup"] == pytest.approx(w["tokens_per_s"] / one["tokens_per_s"])
        assert w["weak_speedup"] <= n and w["strong_speedup"] <= n
        assert "column chunks a layer" in w["weight_chunks"]
        assert w["step_bound"].split()[0] in ("compute", "weights_in", "gradients_out")
    assert rows[64]["wafer"]["strong_speedup"] < 0.8 * 64
    assert rows[64]["wafer"]["step_bound"] == "weights_in"
    weak = _json(["plan", "train", "--model", "llama_1t", "--tokens", "1e12", "--systems",
                  "2048", "--batch", "1"])["wafer"]  # fmt: skip
    assert weak["swarmx_levels"] == 11 and weak["weak_speedup"] < 2048
    # 24T: no tensor x pipeline layout of H100s holds its training state: wafers alone
    d = _json(["plan", "train", "--model", "llama_24t", "--tokens", "1e12"])
    assert d["gpu"] is None and d["gpus_to_match"] is None
    assert d["wafer"]["units"] == 2048 and d["wafer"]["tokens_per_s"] > 0
    r = runner.invoke(app, ["plan", "train", "--model", "llama_24t", "--tokens", "1e12",
                            "--systems", "1"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "speedup vs 1 system" in r.output and "no GPU side" in r.output


def test_plan_train_refuses_a_model_over_memoryx_capacity(tmp_path):
    import yaml

    params = tmp_path / "huge.yaml"  # 250T parameters: 3.0 PB of masters and Adam state
    params.write_text(yaml.safe_dump({
        "train_input": {"batch_size": 1, "max_sequence_length": 2048},
        "model": {"preset": "llama3-70b", "d_model": 131072, "n_layers": 1024,
                  "d_ff": 524288, "n_heads": 1024, "n_kv_heads": 128, "dtype": "bfloat16"},
        "runconfig": {"wafer": "wse3", "max_steps": 10},  # a run's length (hunt 81)
    }))  # fmt: skip
    for args in (["plan", "train", "--model", str(params), "--tokens", "1e12"],
                 ["train", str(params), "--validate_only"]):  # fmt: skip
        r = runner.invoke(app, args)
        assert r.exit_code == 2, r.output
        assert "does not fit in MemoryX" in r.output and "MemoryX holds 1,200 TB" in r.output
        assert len(r.output.strip().splitlines()) == 1
