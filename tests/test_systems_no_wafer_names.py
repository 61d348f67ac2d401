"""Below the edge a wafer arrives as a `WaferSpec`, never as a name (issue 40): the library
sources (`packages/*/src`; not the CLI, the edge that resolves `--preset` / `--spec`, and not
tests) hold no wafer `PRESETS["..."]` default or lookup, parse no wafer name (`"wse3+x"`
split at "+", `spec_name == ...`, a system looked up by a wafer's name) and call no
`preset("...")` / `assumed_spec("...")` with a wafer's name, except where a published case
names its machine: the experiments (`studies/`) and demo parts (`demo/`, `demo.py`), each
the edge of its own scenario, and the calibration set's 8B decode case on WSE-3
(`wse_systems.published.check_case`). Test support modules (`testing.py`) are tests. Model
presets (`wse_models.PRESETS[name]`) are not wafers. The oracle is the source text itself;
`test_the_grep_sees_each_pattern` holds the patterns to hand-written lines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAFERS = r"(wse\d|tiny|small|demo)"
PATTERNS = {
    "wafer PRESETS default or lookup": re.compile(rf"PRESETS\[\s*[\"']{WAFERS}"),
    "wafer name parsed": re.compile(
        r"\.split\(\s*[\"']\+[\"']|spec_name\s*==|\.name\s*==\s*[\"']wse"
    ),
    "system looked up by name": re.compile(r"(system_of|system_power_w|wafer_rates)\(\s*[\"']"),
    "wafer named": re.compile(rf"\b(preset|assumed_spec)\(\s*[\"']{WAFERS}"),
}
# (path suffix, pattern name, why it may)
ALLOWED = [
    ("/wse_systems/published.py", "wafer named", "the calibration set's 8B case on WSE-3"),
]


def _edge(rel: str) -> bool:
    return "/studies/" in rel or "/demo/" in rel or rel.endswith("/demo.py")


def _found() -> list[str]:
    out = []
    for path in sorted(ROOT.glob("packages/*/src/**/*.py")):
        rel = str(path.relative_to(ROOT))
        if rel.endswith("/testing.py"):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for what, pat in PATTERNS.items():
                if not pat.search(line):
                    continue
                if what == "wafer named" and _edge(rel):
                    continue
                if any(rel.endswith(p) and what == w for p, w, _ in ALLOWED):
                    continue
                out.append(f"{rel}:{i}: {what}: {line.strip()}")
    return out


def test_no_wafer_is_looked_up_by_name_below_the_edge():
    assert _found() == []


def test_the_grep_sees_each_pattern():
    lines = {
        "wafer PRESETS default or lookup": 'def f(spec: WaferSpec = PRESETS["wse3"]):',
        "wafer name parsed": 'base = spec.name.split("+", 1)[0]',
        "system looked up by name": 'peak, idle = eco.system_power_w("wse3")',
        "wafer named": 'spec = preset("wse2")',
    }
    for what, line in lines.items():
        assert PATTERNS[what].search(line), what
    assert not PATTERNS["wafer PRESETS default or lookup"].search("PRESETS[name]")
    assert not PATTERNS["wafer named"].search('wse_models.preset_config("llama3-8b")')
