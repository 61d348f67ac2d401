"""Session 86: `wse plan infer` says where a plan on a footprint lies on the wafer, and which
dtype a speculative draft is priced in; a draft folder in a dtype no engine runs is refused
naming the draft.

Broken before: (1) a plan on a footprint (a band of a wafer's PE rows) printed "6 of 8 PE
rows" and its JSON `pe_rows` of `wafer_pe_rows`, never where the band lies (the rows above
and below it: `PipelinePlan.rows_above` / `rows_below`), and said nothing of the draft's
placement; (2) the "weights and KV" row named the target's dtype alone (a bfloat16 draft
of a float32 target read "fp32"); (3) a draft folder whose config.json holds int8 was
refused as "config.json's torch_dtype 'int8' ...", which of the two folders unsaid, and the
planner's refusal of a draft's dtype named the target's `--wafer-dtype`.

Oracles: the plans the command's own serving system serves (recorded as it runs), read
field by field (`rows_above`, `rows_below`, `spec.pe_rows`, `spec.pe_cols`,
`bytes_per_param`); the wafer's PE rows from its spec file (a footprint and the rows around
it make the wafer; the draft's band lies above the target's); each folder's config.json
dtype read directly, with its bytes from a hand table.
"""

from __future__ import annotations

import json
import shutil

import pytest
import typer
from wse_cli.app import app
from wse_cli.model_choice import resolve_model
from wse_cli.testing import invoke, refused_in_one_line
from wse_core import load_spec
from wse_inference.testing import save_tiny_model
from wse_systems.planning import infer as pi
from wse_systems.planning.choice import PlanError

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
GAMMA = 4
BYTES = {"float32": 4, "bfloat16": 2}  # by hand: a float32 value is 4 bytes, bfloat16 2
SHORT = {"float32": "fp32", "bfloat16": "bf16"}  # the table's names (`wse_core.hw.dtypes`)
WIDE = {"COLUMNS": "400"}  # a table row on one line


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(float32 2-layer target, bfloat16 1-layer draft, an 8 x 8 PE wafer with a power)."""
    root = tmp_path_factory.mktemp("s86_spec")
    save_tiny_model(root / "t", n_layers=2, max_seq_len=1024)
    save_tiny_model(root / "d", n_layers=1, max_seq_len=1024, param_dtype="bfloat16", seed=1)
    wafer = root / "tinyw.yaml"
    wafer.write_text("base: tiny\nsystem_peak_w: 1000\n")
    return root / "t", root / "d", wafer


def _recorded(monkeypatch) -> list:
    """The serving systems `wse plan infer` builds, recorded as it runs."""
    made, real = [], pi.wafer_serving

    def recorded(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    monkeypatch.setattr(pi, "wafer_serving", recorded)
    return made


def _run(args: list, monkeypatch) -> tuple[object, dict, str]:
    """(its wafer serving system, `ARGS --json`'s JSON, the table of ARGS)."""
    made = _recorded(monkeypatch)
    code, out = invoke(ROOT, [*args, "--json"])
    assert code == 0, out
    code, table = invoke(ROOT, args, WIDE)
    assert code == 0, table
    return made[0], json.loads(out), table


def _row(table: str, name: str) -> str:
    return next(x for x in table.splitlines() if x.strip("│ ").startswith(name))


def _said(plan, whole: int) -> str:
    """The table's words for `plan`'s band, from its own fields."""
    return (f"{plan.spec.pe_rows} of {whole} PE rows from row {plan.rows_above}, col 0: "
            f"{plan.rows_above} rows above, {plan.rows_below} below")  # fmt: skip


def _same_place(footprint: dict, plan) -> None:
    """The JSON's footprint is the plan's own place on the wafer, field by field."""
    assert footprint == {"row0": plan.rows_above, "col0": 0, "pe_rows": plan.spec.pe_rows,
                         "pe_cols": plan.spec.pe_cols, "rows_above": plan.rows_above,
                         "rows_below": plan.rows_below}  # fmt: skip


def _dtype(folder) -> str:
    d = json.loads((folder / "config.json").read_text())
    return d.get("dtype") or d["torch_dtype"]


def test_a_speculative_plan_says_where_each_model_lies_and_in_what_dtype(pair, monkeypatch):
    target, draft, wafer = pair
    args = ["plan", "infer", "-m", target, "--draft", draft, "--gamma", GAMMA, "--alpha", "0.5",
            "--users", 1, "--spec", wafer]  # fmt: skip
    ws, out, table = _run(args, monkeypatch)
    t, d = ws.plans(1)
    whole = load_spec(wafer).pe_rows
    layout = out["wafer"]["point"]["layout"]
    _same_place(layout["footprint"], t)
    _same_place(layout["draft_footprint"], d)
    # each band and the rows around it make the wafer; the draft's above the target's
    for p in (t, d):
        assert p.rows_above + p.spec.pe_rows + p.rows_below == whole
    assert d.rows_above + d.spec.pe_rows <= t.rows_above and d.rows_below > 0
    assert 0 < t.spec.pe_rows < whole  # a footprint, so the table says where it lies
    assert _said(t, whole) in _row(table, "per replica")
    assert _said(d, whole) in _row(table, "draft per replica")
    # the draft's dtype beside the target's: each folder's own, its bytes the plan holds
    own, drafted = _dtype(target), _dtype(draft)
    assert (own, drafted) == ("float32", "bfloat16")
    assert [p.bytes_per_param for p in (t, d)] == [BYTES[own], BYTES[drafted]]
    inputs = out["inputs"]
    assert (inputs["wafer_dtype"], inputs["wafer_bytes_per_param"]) == (SHORT[own], BYTES[own])
    assert (inputs["draft_dtype"], inputs["draft_bytes_per_param"]) == (
        SHORT[drafted], BYTES[drafted]
    )  # fmt: skip
    assert (f"{SHORT[own]} ({BYTES[own]} B a value); draft {SHORT[drafted]} "
            f"({BYTES[drafted]} B)") in _row(table, "weights and KV")  # fmt: skip
    # the engine's report names the same place (`PipelinePlan.summary`)
    assert t.summary()["footprint"] == layout["footprint"]


def test_an_asked_wafer_dtype_is_the_drafts_too(pair, monkeypatch):
    target, draft, wafer = pair
    args = ["plan", "infer", "-m", target, "--draft", draft, "--gamma", GAMMA, "--alpha", "0.5",
            "--users", 1, "--spec", wafer, "--wafer-dtype", "float32"]  # fmt: skip
    ws, out, table = _run(args, monkeypatch)
    assert [p.bytes_per_param for p in ws.plans(1)] == [BYTES["float32"]] * 2
    assert (out["inputs"]["draft_dtype"], out["inputs"]["draft_bytes_per_param"]) == ("fp32", 4)
    assert "fp32 (4 B a value); draft fp32 (4 B)" in _row(table, "weights and KV")


def test_a_plain_plan_on_a_footprint_says_where_it_lies(tiny_model_dir, monkeypatch):
    """Hunt jobs17: the 2-layer toy at 2 users on a WSE-3 takes a band of its rows."""
    args = ["plan", "infer", "-m", tiny_model_dir, "--users", 2, "--prompt-tokens", 8,
            "--output-tokens", 8, "--wafer", "wse3"]  # fmt: skip
    ws, out, table = _run(args, monkeypatch)
    plan, none = ws.plans(2)
    whole = ws.spec.pe_rows
    layout = out["wafer"]["point"]["layout"]
    assert none is None and layout["draft_footprint"] is None
    _same_place(layout["footprint"], plan)
    assert plan.rows_above + plan.spec.pe_rows + plan.rows_below == whole
    assert plan.spec.pe_rows < whole, "the case: a footprint"
    assert _said(plan, whole) in _row(table, "per replica")
    assert not any(x.strip("│ ").startswith("draft per replica") for x in table.splitlines())
    assert "draft_dtype" not in out["inputs"]
    assert _row(table, "weights and KV").split("│")[2].strip() == "fp32"  # as before


@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3fn"])
def test_a_draft_folder_no_engine_runs_is_refused_naming_the_draft(pair, tmp_path, dtype):
    target, draft, wafer = pair
    odd = tmp_path / "odd_draft"
    shutil.copytree(draft, odd)
    d = json.loads((odd / "config.json").read_text())
    d.pop("dtype", None)
    (odd / "config.json").write_text(json.dumps({**d, "torch_dtype": dtype}))
    args = ["plan", "infer", "-m", target, "--draft", odd, "--alpha", "0.5", "--users", 1,
            "--spec", wafer]  # fmt: skip
    line = refused_in_one_line(
        ROOT, args, f"--draft {odd} (the draft folder): config.json's torch_dtype '{dtype}'"
    )
    assert "float32 or bfloat16" in line  # what a draft folder may hold
    assert "--wafer-dtype" not in line


def test_the_planner_refuses_a_drafts_dtype_naming_the_draft(pair):
    """The draft's own dtype (`Draft.dtype`) the wafer does not price: the draft named, not
    the target's --wafer-dtype (which is float32 here, and fine)."""
    target, draft, wafer = pair
    drafted = resolve_model(str(draft))
    with pytest.raises(PlanError) as e:
        pi.plan_infer(resolve_model(str(target)),
                      wafer=pi.WaferSetup(load_spec(wafer), 1, "sdk", "float32"),
                      draft=pi.Draft(drafted, GAMMA, 0.5, "int8"))  # fmt: skip
    assert str(e.value).startswith(f"--draft {drafted.name}: its dtype 'int8' is not one")
    assert "--wafer-dtype 'int8'" not in str(e.value)
