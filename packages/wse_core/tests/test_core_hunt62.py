"""Hunt 62 in wse_core: a list or mapping in a spec's number field was a TypeError (and,
in a spec without `base:`, "lacks the fields :"); a program rectangle past the PE grid was
accepted; YAML merge keys (`<<: *anchor`), which `yaml.safe_load` reads, were refused."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from wse_core.cost.assumptions import resolve_spec
from wse_core.errors import SpecError
from wse_core.host.limits import LimitError
from wse_core.host.readers import load_yaml
from wse_core.hw.spec import WaferSpec, load_spec, preset

TYPES = {f.name: f.type for f in dataclasses.fields(WaferSpec)}
NUMBER_FIELDS = [name for name, kind in TYPES.items() if kind in ("int", "float")]


@pytest.mark.parametrize("value", [[0.1], {"a": 1}, None], ids=["list", "mapping", "null"])
@pytest.mark.parametrize("field", NUMBER_FIELDS)
def test_every_number_field_refuses_a_value_that_is_no_number(field, value):
    kind = "an integer" if TYPES[field] == "int" else "a number (int or float)"
    with pytest.raises(SpecError) as e:
        preset("wse3").replace(**{field: value})
    assert str(e.value).startswith(f"{field} must be {kind}, got {value!r}")


def _whole_spec(tmp_path, **changes):
    data = {**preset("wse3").to_dict(), **changes}
    path = tmp_path / "whole.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_whole_spec_file_names_the_bad_field_not_missing_ones(tmp_path):
    with pytest.raises(SpecError) as e:
        load_spec(_whole_spec(tmp_path, defect_rate=[0.1]))
    assert str(e.value) == "defect_rate must be a number (int or float), got [0.1] (list)"


def test_a_whole_spec_file_lacking_fields_still_names_them(tmp_path):
    path = _whole_spec(tmp_path)
    data = yaml.safe_load(path.read_text())
    del data["clock_hz"], data["pe_rows"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="lacks the fields pe_rows, clock_hz: give every field"):
        load_spec(path)


@pytest.mark.parametrize(
    ("field", "side", "grid"), [("program_rows", "pe_rows", 757), ("program_cols", "pe_cols", 996)]
)
def test_a_program_rectangle_past_the_grid_is_refused(tmp_path, field, side, grid):
    path = tmp_path / "s.yaml"
    path.write_text(f"base: wse2\n{field}: 100000\n")
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert str(e.value) == f"{field} must be at most {side} ({grid}), got 100,000"
    with pytest.raises(SpecError, match=f"{field} must be at most {side}"):
        resolve_spec(name="wse2", sets={field: str(grid + 1)})
    # the grid itself fits: a rectangle as large as the grid, and the preset's own
    assert getattr(resolve_spec(name="wse2", sets={field: str(grid)}), field) == grid
    assert resolve_spec(name="wse2", sets={"pe_rows": "100"}).program_rows == 750  # kept


MERGES = [
    "a: &a {x: 1, y: 2}\nb:\n  <<: *a\n  y: 3\n",  # its own key overrides the merged one
    "a: &a {x: 1, y: 2}\nb:\n  y: 3\n  <<: *a\n",  # wherever the merge key stands
    "a: &a {x: 1}\nc: &c {x: 5, z: 1}\nb:\n  <<: [*a, *c]\n",  # the first mapping wins
    "b: &b {x: 1}\na: &a\n  <<: *b\n  x: 2\nm:\n  <<: *a\n  q: 1\n",  # a merge of a merge
    "m:\n  <<: &a\n    <<: &b {x: 1}\n    x: 2\n  q: 1\nn: *a\n",  # flattened before built
    "l: [&a {x: 1}, {<<: *a, x: 2}, *a]\n",
]


@pytest.mark.parametrize("text", MERGES)
def test_merge_keys_read_as_pyyaml_reads_them(text):
    assert load_yaml(text, "f") == yaml.safe_load(text)


@pytest.mark.parametrize(
    ("text", "line"),
    [("a: &a {x: 1}\nb:\n  <<: *a\n  y: 1\n  y: 2\n", 5),
     ("m:\n  <<: &a\n    <<: &b {x: 1}\n    x: 2\n    x: 3\nn: *a\n", 5)],
)  # fmt: skip
def test_a_mapping_own_key_given_twice_is_still_refused_beside_a_merge(text, line):
    with pytest.raises(yaml.constructor.ConstructorError, match=f"duplicate key .* line {line}"):
        load_yaml(text, "f")


def test_merges_count_toward_yaml_nodes():
    # each level merges the one below twice: few keys once built, 2**25 nodes expanded
    lines = ["l0: &l0 {a: 1, b: 2}"]
    lines += [f"l{i}: &l{i} {{<<: [*l{i - 1}, *l{i - 1}], k{i}: 1}}" for i in range(1, 25)]
    with pytest.raises(LimitError, match="with its aliases expanded is 335,544,211 nodes"):
        load_yaml("\n".join(lines), "bomb")
