"""The PyTorch baseline of bench_infer (bench/torch_baseline.py) decodes the same tokens as the
plain JAX decoder."""

import importlib.util
from pathlib import Path

import pytest
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import SamplingParams
from wse_inference.testing import tiny_model


@pytest.mark.slow
def test_torch_baseline_matches_plain_decoder():
    pytest.importorskip("torch")
    path = Path(__file__).resolve().parents[1] / "bench" / "torch_baseline.py"
    spec = importlib.util.spec_from_file_location("torch_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    TorchDecoder = module.TorchDecoder

    model = tiny_model("llama", n_layers=2, seed=2)
    prompt = [9, 8, 7, 6, 5, 4, 3]
    torch_tokens, _ = TorchDecoder(model.config, model.params, max_len=64).generate(prompt, 12)
    plain = PlainDecoder(model.config, model.params, max_context=64).generate(
        prompt, SamplingParams(max_tokens=12, temperature=0.0)
    )
    assert torch_tokens == plain.tokens
