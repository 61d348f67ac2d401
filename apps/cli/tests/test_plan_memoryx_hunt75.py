"""Hunt 75 (trainfix) on the command line: MemoryX's capacity under `--assume`, strides past
the layer count, and the Llama 3 8B figures the docstrings quote.

Broken before:
- `wse plan train -m llama3_8b.yaml --assume memoryx_capacity_bytes=X` of a capacity the
  model fits was refused as "wse plan train does not read it" (the capacity check read the
  constant without noting it), while a capacity it does not fit refused the plan: no what-if
  ("does an sgd model fit in 50 GB") could be answered;
- `runconfig.activation_stride` 33 or 100 on 32 layers was planned ("kept every 100
  layer(s)");
- micro_batch.py and stride.py quoted 8.92 s (48 x 1) and 6.35 s (8 x 6), the preset's, where
  the shipped config (4 systems, clipping) gives 9.02 s and 6.45 s (9.76 s and 6.46 s since
  hunt 82 took the program's 2 KiB off the token passes).

Oracles: MemoryX's bytes from Llama 3 8B's published shape (Meta-Llama-3-8B config.json:
vocab 128,256, hidden 4,096, 32 layers, 32 heads, 8 KV heads, MLP 14,336, untied embeddings)
counted by hand, times (1 + the optimizer's fp32 slots, as optax keeps them: AdamW's mu and
nu, two; plain SGD none) times 4 bytes (fp32), as the plan states it; the layer count from
the same config.json; the docstrings' figures against the command they name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_systems.training import micro_batch, stride
from wse_trainer.config import shipped_config

ROOT = typer.main.get_command(app)
SHIPPED = shipped_config("llama3_8b")
LAYERS = 32  # config.json num_hidden_layers


def _llama3_8b_params() -> int:
    """Meta-Llama-3-8B's parameters from its config.json, by hand."""
    vocab, d, layers, heads, kv, ff = 128_256, 4_096, LAYERS, 32, 8, 14_336
    head_dim = d // heads
    attn = 2 * d * d + 2 * d * kv * head_dim  # q, o; k, v
    per_layer = attn + 3 * d * ff + 2 * d  # gate, up, down; two RMSNorms
    return layers * per_layer + 2 * vocab * d + d  # embedding, untied head, final norm


N = _llama3_8b_params()


def _memoryx_bytes(slots: int) -> int:
    return 4 * N * (1 + slots)


def _params(tmp_path: Path, name: str, optimizer: dict | None = None, **run) -> Path:
    """The shipped config with `optimizer` and `run` set (a None value drops the key)."""
    doc = yaml.safe_load(SHIPPED.read_text())
    doc["optimizer"].update(optimizer or {})
    doc["optimizer"] = {k: v for k, v in doc["optimizer"].items() if v is not None}
    doc["runconfig"].update(run)
    out = tmp_path / f"{name}.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def _plan(params: Path, *extra: str) -> tuple[int, str]:
    args = ["plan", "train", "-m", str(params), "--tokens", "1e12", "--batch", "16",
            "--micro-batch", "none", *extra]  # fmt: skip
    return invoke(ROOT, args)


def _assumed(params: Path, capacity: float) -> tuple[int, str]:
    return _plan(params, "--json", "--assume", f"memoryx_capacity_bytes={capacity!r}")


def test_the_hand_count_is_llama3_8b():
    assert N == 8_030_261_248  # the published 8.03B (the model card's count)


def test_a_capacity_just_above_the_state_fits_and_is_listed_as_assumed():
    """Before: refused, "wse plan train does not read it"."""
    above = _memoryx_bytes(2) * (1 + 1e-6)  # AdamW
    code, out = _assumed(SHIPPED, above)
    assert code == 0, out[-800:]
    d = json.loads(out)
    assert d["assume"] == {"memoryx_capacity_bytes": above}
    (entry,) = [e for e in d["assumed"] if e["name"] == "memoryx_capacity_bytes"]
    assert entry["assumed"] is True and entry["value"] == pytest.approx(above, rel=1e-12)
    args = ["plan", "train", "-m", str(SHIPPED), "--tokens", "1e12", "--batch", "16",
            "--micro-batch", "none", "--assume", f"memoryx_capacity_bytes={above!r}"]  # fmt: skip
    code, table = invoke(ROOT, args, {"COLUMNS": "400"})
    assert code == 0 and "memoryx_capacity_bytes" in table and "--assume)" in table


def test_a_capacity_just_below_the_state_is_refused_in_one_line():
    below = _memoryx_bytes(2) * (1 - 1e-6)
    code, out = _assumed(SHIPPED, below)
    assert code == 2, out[-800:]
    assert len(out.strip().splitlines()) == 1
    assert "does not fit in MemoryX" in out
    assert f"take {_memoryx_bytes(2) / 1e12:,.4g} TB" in out


def test_an_sgd_model_fits_in_50_gb_where_adamw_does_not(tmp_path):
    """The what-if: plain SGD keeps no state beside the master (32.1 GB < 50 GB)."""
    sgd = _params(tmp_path, "sgd", {"optimizer_type": "sgd", "beta2": None, "eps": None})
    assert _memoryx_bytes(0) < 50e9 < _memoryx_bytes(2)
    code, out = _assumed(sgd, 50e9)
    assert code == 0, out[-800:]
    assert any(e["name"] == "memoryx_capacity_bytes" and e["assumed"]
               for e in json.loads(out)["assumed"])  # fmt: skip
    code, out = _assumed(SHIPPED, 50e9)
    assert code == 2 and "does not fit in MemoryX" in out


@pytest.mark.parametrize("k", [LAYERS + 1, 100])
def test_a_stride_past_the_layer_count_is_refused_by_plan_and_train(tmp_path, k):
    """Before: planned as "kept every 100 layer(s)"."""
    params = _params(tmp_path, f"s{k}", activation_stride=k)
    for code, out in (_plan(params), invoke(ROOT, ["train", str(params), "--validate-only"])):
        assert code == 2, out[-800:]
        assert len(out.strip().splitlines()) == 1
        assert f"activation_stride {k} is more than the model's {LAYERS} layers" in out
        assert f"give 1 to {LAYERS}" in out


def test_a_stride_of_the_layer_count_is_kept(tmp_path):
    params = _params(tmp_path, "s32", activation_stride=LAYERS)
    code, out = invoke(ROOT, ["train", str(params), "--validate-only"], {"COLUMNS": "400"})
    assert code == 0, out[-800:]
    assert f"activations kept every {LAYERS} layer(s), at most {LAYERS} layer inputs" in out


def _quoted(doc: str, pattern: str) -> float:
    return float(re.search(pattern, " ".join(doc.split())).group(1))


def test_the_docstrings_figures_are_the_shipped_configs():
    """micro_batch.py and stride.py quote the command they name, on the shipped config."""
    steps = {}
    for mb in ("none", "8"):
        args = ["plan", "train", "-m", "llama3_8b", "--tokens", "1e12", "--batch", "48",
                "--micro-batch", mb, "--json"]  # fmt: skip
        code, out = invoke(ROOT, args)
        assert code == 0, out[-800:]
        steps[mb] = json.loads(out)["wafer"]["step_s"]
    whole = _quoted(micro_batch.__doc__, r"48 x 1 takes ([\d.]+) s")
    assert whole == float(f"{steps['none']:.3g}")
    assert _quoted(micro_batch.__doc__, r"explore's 8 x 6 ([\d.]+) s") == float(f"{steps['8']:.3g}")
    assert _quoted(stride.__doc__, r"stride 4 holds 11 and takes ([\d.]+) s") == whole
