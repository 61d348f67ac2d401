"""Review 80 (hole 3): docs/plan.md gave Llama 3 8B's last pipeline stage (tp 2 x pp 2,
131,072 tokens) as 84.5 GB, its size at 16 bytes a parameter, in the paragraph that states
18 bytes are priced (the hunt 79 commit moved the price to 18 and not the page).

Oracle: the stage by hand, Megatron's accounting as packages/systems/tests/
test_gpumem_hunt79.py counts it (18 bytes x (16 layers + the final norm + the untied head),
16 layers' bf16 inputs 2 s d, one layer's working set 34 s d, the fp32 logits 4 s (d + V),
all over tp 2), and the even share that was priced before it (16 bytes over tp x pp)."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "plan.md"
LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096  # Llama 3.1 8B
EMBED, FINAL = 128256 * 4096, 4096 + 128256 * 4096
PARAMS = EMBED + 32 * LAYER + FINAL
S, TP, PP = 131072, 2, 2
SD = S * 4096


def test_plan_md_gives_the_last_stage_at_18_bytes_a_parameter():
    text = " ".join(PAGE.read_text().split())
    found = re.search(r"fitted at ([\d.]+) GB a GPU, its last stage holds ([\d.]+) GB", text)
    assert found, "the paragraph on per-stage memory moved"
    even = 16 * PARAMS / (TP * PP) + (32 * 2 * SD + 34 * SD) / TP
    last = (18 * (16 * LAYER + FINAL) + 16 * 2 * SD + 34 * SD + 4 * S * (4096 + 128256)) / TP
    assert "18 bytes" in text
    assert float(found.group(1)) == round(even / 1e9, 1) == 58.4
    assert float(found.group(2)) == round(last / 1e9, 1) == 88.5  # before: 84.5, 16 bytes'
