"""Hunt 75d: every tensor-parallel size vLLM runs within a node is tried, not only powers of
two. Before: `wse plan infer -m gpt2-124m --gpus 3` quoted vLLM's rule and then refused
tp 3, which vLLM accepts for GPT-2's 12 heads (served as 3 x tp 1). The oracle is vLLM's
documented check written out by hand (heads % tp == 0; KV heads % tp == 0 below them, tp %
KV heads == 0 above)."""

from __future__ import annotations

import wse_models
from wse_systems import gpu as gpum
from wse_systems.serving import GpuServing, Workload
from wse_systems.serving import gpu_step as gs

WORK = Workload(prompt_tokens=512, output_tokens=256)


def _vllm(heads: int, kv: int, tp: int) -> bool:
    return heads % tp == 0 and (kv % tp == 0 if tp <= kv else tp % kv == 0)


def test_every_tp_vllm_accepts_within_a_node():
    for name in ("gpt2-124m", "llama3-8b", "gpt2-1.5b"):
        m = wse_models.preset_config(name)
        for n in range(1, 9):
            want = {t for t in range(1, n + 1) if _vllm(m.n_heads, m.n_kv_heads, t)}
            assert set(gs.replica_sizes(n, gpum.H100, m)) == want, (name, n)


def test_gpt2_gets_tp_3_and_6_and_the_note_holds():
    m = wse_models.preset_config("gpt2-124m")  # 12 heads
    three = GpuServing(m, gpum.H100, num_gpus=3, workload=WORK)
    assert 3 in {lay.tp for lay in three.layouts}
    six = GpuServing(m, gpum.H100, num_gpus=6, workload=WORK)
    assert {lay.tp for lay in six.layouts} == {1, 2, 3, 4, 6}  # tp 4: 2 GPUs idle
    # a tp group of all the GPUs runs: no note; 7 (12 % 7) and 5 are refused: a note
    assert gs.tp_note(m, gpum.H100, 3, 3, 1) is None and gs.tp_note(m, gpum.H100, 6, 6, 1) is None
    note = gs.tp_note(m, gpum.H100, 7, 6, 1)
    assert "12 attention heads" in note and "1 GPU(s) idle" in note and "1, 2, 4" not in note
    idle = gs.tp_note(m, gpum.H100, 3, 2, 1)  # tp 3 runs, but tp 2 served the load
    assert idle.startswith("3 GPUs: tp 3 runs") and "1 x tp 2 x pp 1, 1 GPU(s) idle" in idle
    assert gs.tp_note(m, gpum.H100, 3, 1, 1) is None  # 3 x tp 1: every GPU used
    llama = wse_models.preset_config("llama3-8b")  # 32 heads, 8 KV: tp 3, 5, 6, 7 refused
    for n in (3, 5, 6, 7):
        assert gs.tp_note(llama, gpum.H100, n, 1, 1) is not None
