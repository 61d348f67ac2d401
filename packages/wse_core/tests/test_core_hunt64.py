"""Hunt 64 in wse_core's wafer specs and repair.

Broken before the fixes:
- spec files read integers by YAML 1.1 rules while their floats and `--set` follow YAML 1.2
  and Python: `spare_rows: 010` was octal 8 (`--set spare_rows=010` is 10), `pe_rows: 7:30`
  was base 60 (450), `0b101` binary; and an integer of 5,000 digits was a ValueError
  traceback (past int()'s 4,300 digits).
- `simd_widths: {add.fp16: yes}` was a width of 1 (True), where every other number field
  refuses YAML's booleans.
- a name holding a lone surrogate, a newline, ESC or U+202E was accepted: printing it was a
  UnicodeEncodeError traceback, or a report on two lines, or text turned around.
- "not repairable" on a wafer without spare rows ended "all 0 spare rows are used by rows -".
"""

from __future__ import annotations

import numpy as np
import pytest
from wse_core import DefectError, defect_map, load_spec, remap
from wse_core.errors import SpecError
from wse_core.hw.spec import preset


def _spec_file(tmp_path, body: str):
    path = tmp_path / "s.yaml"
    path.write_text(f"base: wse3\n{body}\n")
    return path


@pytest.mark.parametrize(
    ("text", "value"),
    [("010", 10), ("0010", 10), ("+7", 7), ("0o10", 8), ("0x10", 16), ("1_0", 10), ("1e1", 10)],
)
def test_spec_file_integers_are_read_as_yaml_1_2_and_set_reads_them(tmp_path, text, value):
    spec = load_spec(_spec_file(tmp_path, f"spare_rows: {text}"))
    assert spec.spare_rows == value
    if text.isdigit():  # --set reads decimal text as Python does: the same number
        assert preset("wse3").replace(spare_rows=text).spare_rows == value


@pytest.mark.parametrize("text", ["7:30", "1:30.5", "0b101", "-0b1"])
def test_yaml_1_1_only_numbers_are_refused_as_text(tmp_path, text):
    path = _spec_file(tmp_path, f"pe_rows: {text}")
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert str(e.value) == (
        f"pe_rows in spec file {str(path)!r} must be a number, got the text {text!r}: spec "
        "files read numbers as YAML 1.2 does (10, 010 = 10, 0o17, 0x1f, 1.5e9); base 60 "
        "(7:30) and 0b101 are text"
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [("1.5e9", 1.5e9), ("15e8", 1.5e9), ("1_500_000_000", 1.5e9), ("!!float 1500000000", 1.5e9),
     (".5e-3", 5e-4), ("-.5", -0.5), ("+1e3", 1e3), ("-.inf", -np.inf)],
)  # fmt: skip
def test_floats_keep_their_yaml_1_2_reading(tmp_path, text, value):
    import yaml
    from wse_core.hw.presets import spec_loader

    assert yaml.load(f"x: {text}", Loader=spec_loader())["x"] == value
    if value > 1e6:
        assert load_spec(_spec_file(tmp_path, f"clock_hz: {text}")).clock_hz == value


def test_an_integer_past_any_field_is_one_yaml_error(tmp_path):
    path = _spec_file(tmp_path, "pe_rows: " + "1" * 5000)
    with pytest.raises(SpecError, match="an integer of 5,000 digits is past any field's range"):
        load_spec(path)
    path = _spec_file(tmp_path, "pe_rows: !!int 0b101")
    with pytest.raises(SpecError, match="'0b101' is no integer YAML 1.2 reads"):
        load_spec(path)


@pytest.mark.parametrize("width", ["yes", "true", "false", "on"])
def test_a_yaml_boolean_is_no_simd_width(tmp_path, width):
    path = _spec_file(tmp_path, f"simd_widths: {{add.fp16: {width}, mul.fp16: 8}}")
    with pytest.raises(SpecError, match=r"simd_widths\['add.fp16'\] must be a positive number"):
        load_spec(path)
    with pytest.raises(SpecError, match="got True"):
        preset("wse3").replace(simd_widths={"add.fp16": True})


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("w\ud800", "'\\ud800' (U+D800), a lone surrogate, not text, at character 2"),
        ("a\nb", "'\\n' (U+000A), a control character, at character 2"),
        ("\x1b[31mred", "'\\x1b' (U+001B), a control character, at character 1"),
        ("ab\u202ec", "'\\u202e' (U+202E), a format character, at character 3"),
        ("x\u2028y", "'\\u2028' (U+2028), a control character, at character 2"),
        ("run\udcff", "byte 0xff, which is not UTF-8, at character 4"),
    ],
)
@pytest.mark.parametrize("field", ["name", "system", "system_source"])
def test_a_text_field_is_one_printable_line(field, name, why):
    with pytest.raises(SpecError) as e:
        preset("wse3").replace(**{field: name})
    assert str(e.value) == f"{field} holds {why}; a {field} is one line of printable text"


@pytest.mark.parametrize("name", ["Cerebras [/x]", "wse3 rev B", "café 🙂", "名前", "a\u00a0b"])
def test_ordinary_names_are_kept(name):
    assert preset("wse3").replace(name=name).name == name


def _first_unrepaired(spec, dm) -> tuple[int, int]:
    """The oracle: the first row with more dead PEs than spare columns that no spare row is
    left for, and its dead PEs, counted with NumPy."""
    per_row = dm.dead.sum(axis=1)
    over = np.flatnonzero(per_row > spec.spare_cols)
    return int(over[spec.spare_rows]), int(per_row[over[spec.spare_rows]])


def test_a_wafer_without_spare_rows_says_so():
    spec = preset("wse3")
    dm = defect_map(spec, 0, 0.01)
    row, dead = _first_unrepaired(spec, dm)
    with pytest.raises(DefectError) as e:
        remap(spec, dm)
    assert str(e.value) == (
        f"not repairable: physical row {row} has {dead} dead PEs but only 12 spare columns, "
        "and the wafer has no spare rows to replace it"
    )


@pytest.mark.parametrize(("spares", "rows"), [(1, "row"), (2, "rows")])
def test_the_spare_rows_used_are_named(spares, rows):
    spec = preset("demo").replace(spare_rows=spares, spare_cols=1)
    dm = defect_map(spec, 3, 0.05)
    row, dead = _first_unrepaired(spec, dm)
    over = np.flatnonzero(dm.dead.sum(axis=1) > 1)[:spares]
    with pytest.raises(DefectError) as e:
        remap(spec, dm)
    verb = "replaces" if spares == 1 else "replace"
    assert str(e.value) == (
        f"not repairable: physical row {row} has {dead} dead PEs but only 1 spare column, and "
        f"its {spares} spare {rows} already {verb} {rows} {', '.join(map(str, over))}"
    )
