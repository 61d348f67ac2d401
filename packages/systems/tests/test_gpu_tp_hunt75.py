"""The GPU side prices only tensor-parallel sizes the engines run (hunt 75).

tp 3, 5, 6 and 7 were priced for Llama 3 8B (32 attention heads, 8 KV heads), which vLLM
refuses. The oracle is vLLM's documented check, written out by hand: num_attention_heads %
tp == 0, and num_kv_heads % tp == 0 below the KV heads or tp % num_kv_heads == 0 above them
(the KV heads replicated); within a node tp is a power of two up to the node.
"""

from __future__ import annotations

import types

import wse_models
from wse_systems import gpu as gpum
from wse_systems.serving import GpuServing, Workload
from wse_systems.serving import gpu_step as gs

WORK = Workload(prompt_tokens=1024, output_tokens=256)


def _vllm_accepts(heads: int, kv: int, tp: int) -> bool:
    if heads % tp:
        return False
    return kv % tp == 0 if tp <= kv else tp % kv == 0


def test_no_layout_the_engines_refuse():
    config = wse_models.preset_config("llama3-8b")
    for n in range(1, 9):
        serve = GpuServing(config, gpum.H100, num_gpus=n, workload=WORK)
        for lay in serve.layouts:
            assert _vllm_accepts(config.n_heads, config.n_kv_heads, lay.tp), (n, lay)
            assert lay.tp in (1, 2, 4, 8) and lay.gpus <= n
    seven = GpuServing(config, gpum.H100, num_gpus=7, workload=WORK)
    assert {lay.tp for lay in seven.layouts} == {1, 2, 4}  # 7 refused: 32 % 7
    p = seven.point(64)
    assert p.layout["replicas"] == 7 // p.layout["tp"]


def test_the_rule_on_odd_heads():
    for heads, kv in ((32, 8), (12, 12), (40, 8), (64, 8), (14, 2), (28, 4), (6, 6)):
        shape = types.SimpleNamespace(n_heads=heads, n_kv_heads=kv)
        for tp in range(1, 17):
            assert gs.tp_ok(shape, tp) == _vllm_accepts(heads, kv, tp), (heads, kv, tp)


def test_a_note_says_why():
    config = wse_models.preset_config("llama3-8b")
    note = gs.tp_note(config, gpum.H100, 7, 2, 1)
    assert "32 attention heads" in note and "8 KV heads" in note and "1 GPU(s) idle" in note
    assert gs.tp_note(config, gpum.H100, 8, 8, 1) is None
    assert gs.tp_note(config, gpum.H100, 16, 8, 2) is None
