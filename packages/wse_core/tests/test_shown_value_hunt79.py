"""Hunt 79 (new78 #5): `errors.shown_value` spells a value as the YAML or JSON file does.

A date key printed as Python's `datetime.date(2020, 1, 1)`, and 10**40 as 1.000e+40 alone but
in its digits inside a list. Oracle: YAML reads the shown text back as the value it was
(PyYAML's safe_load, the reader of the stack's config files), and a value is spelled the
same alone and as an item of a list or a key or value of a mapping.
"""

from __future__ import annotations

import datetime

import pytest
import yaml
from wse_core.errors import SHOWN_CHARS, shown_value

DAY = datetime.date(2020, 1, 1)


@pytest.mark.parametrize(
    "value",
    [
        {DAY: 1},
        {3: "a", 2.5: None, True: [DAY]},
        10**40,
        [10**40],
        -(10**20),
        {"k": {DAY: [10**20, False]}},
        datetime.datetime(2020, 1, 1, 3, 4, 5),
    ],
)
def test_yaml_reads_back_what_is_shown(value):
    shown = shown_value(value)
    assert len(shown) <= SHOWN_CHARS  # short enough to be shown whole
    assert yaml.safe_load(shown) == value, shown
    assert "datetime" not in shown and "e+" not in shown


@pytest.mark.parametrize("value", [10**40, DAY, None, True, 7, b"ab", -(10**16), 2.5])
def test_a_value_is_spelled_the_same_alone_and_inside_a_list_or_mapping(value):
    alone = shown_value(value)
    assert shown_value([value]) == f"[{alone}]"
    assert shown_value({"k": value}) == f'{{"k": {alone}}}'
    if isinstance(value, bytes):
        return  # no mapping key
    assert shown_value({value: 1}) == f"{{{alone}: 1}}"


def test_a_list_that_holds_itself_and_an_integer_past_str_are_shown_not_raised():
    loop = yaml.safe_load("&a [1, *a]")
    assert shown_value(loop) == "[1, [...]]"
    assert shown_value([10**5000]) == "[an integer of about 5,001 digits]"
