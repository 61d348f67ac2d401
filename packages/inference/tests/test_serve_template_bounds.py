"""Hunt 62: what a chat template builds in one render is bounded where it is built.

`template_chars` was bypassed by `~` (Jinja's str_join, not call_binop), by `{% set %}`
captures (the environment's concat) and by output chunks (ticked, never charged): 27
characters of content doubled a namespace string to 268 M characters. One operation ran
past `template_ms` before any check: `(n + 6) ** 12345678` (6.6 s, the GIL held), `7 **
12345678` folded at compile time, `lipsum(n=1000000)` (49 s). One call grew a string faster
than its arguments and was charged only once built: `s.replace('x', s)`, `expandtabs`,
`join`, `translate`, str.format's widths, the replace / join / indent / wordwrap / center /
format / tojson / sum filters. Each is now refused before the value is built, quickly, and
what a template that stays within the bounds renders is stock Jinja's."""

from __future__ import annotations

import functools
import json
import time
import tracemalloc

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from wse_inference.mock import ByteTokenizer
from wse_inference.serve.admission import InvalidRequestError
from wse_inference.serve.chat_template import chat_prompt, render_bounded

CHARS = 1_000_000  # template_chars for these tests: the holes built 100x past it and more
OVER_CHARS = f"more than {CHARS:,} characters"
OVER_DIGITS = "past the 4,300 Python writes out (sys.get_int_max_str_digits())"


@pytest.fixture(autouse=True)
def _small_budget(monkeypatch):
    monkeypatch.setenv("WSE_LIMIT_TEMPLATE_CHARS", str(CHARS))


def _chat(content: str = "x") -> list[dict]:
    return [{"role": "user", "content": content}]


def _refused(template: str, content: str = "x") -> tuple[str, float, int]:
    """render_bounded's refusal of `template` on one user message: (message, seconds, the
    largest Python allocation peak it made, in bytes)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(InvalidRequestError) as e:
            render_bounded(template, messages=_chat(content), add_generation_prompt=True)
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.param == "messages"
    return str(e.value), seconds, peak


def _assert_refused_small(template: str, message: str, content: str = "x") -> None:
    got, seconds, peak = _refused(template, content)
    assert message in got, got
    assert seconds < 1.0, seconds
    # within the 1 MB budget (a str of 1 M characters is ~1 MB): nothing 10x past it built
    assert peak < 10 * CHARS, peak


DOUBLING = (
    "{% set ns = namespace(s='xx') %}"
    "{% for _ in range(messages[0].content|length) %}{BODY}{% endfor %}{{ ns.s }}"
)


@pytest.mark.parametrize(
    "template",
    [
        # the issue's: 27 characters built 268 M characters (RSS 70 -> 608 MB)
        DOUBLING.replace("{BODY}", "{% set ns.s = ns.s ~ ns.s %}"),
        DOUBLING.replace("{BODY}", "{% set x %}{{ ns.s }}{{ ns.s }}{% endset %}{% set ns.s = x %}"),
        # output chunks: the same 100,000-character string written 100 times
        "{% set s = 'x' * 100000 %}{% for _ in range(100) %}{{ s }}{% endfor %}",
        # a list of 100 items, each a 100,000-character string: str() writes 10 M
        "{% set s = 'x' * 100000 %}{{ [s] * 100 }}",
        "{% set s = 'x' * 100000 %}{{ '' ~ [s] * 100 }}",
        "{% set s = 'x' * 100000 %}{% macro m() %}{{ s }}{{ s }}{% endmacro %}"
        "{% for _ in range(10) %}{{ m() ~ m() }}{% endfor %}",
    ],
    ids=["tilde", "capture", "output", "output-list", "tilde-list", "macro"],
)
def test_tilde_captures_and_output_chunks_are_charged(template):
    _assert_refused_small(template, OVER_CHARS, content="x" * 27)


@pytest.mark.parametrize(
    "template",
    [
        "{{ (messages|length + 6) ** 12345678 > 1 }}",  # 6.6 s with the GIL held
        "{{ 7 ** 12345678 }}",  # was folded when the template was compiled: 8.9 s
        "{% set n = 10 ** 3000 %}{{ n * n > 1 }}",
        "{% set n = 10 ** 3000 %}{{ (n * messages|length) * n > 1 }}",
    ],
    ids=["pow", "pow-constant", "product", "product-late"],
)
def test_integer_powers_and_products_are_sized_before_they_run(template):
    t0 = time.perf_counter()
    _assert_refused_small(template, OVER_DIGITS)  # compiling included: nothing folded
    assert time.perf_counter() - t0 < 1.0
    with pytest.raises(ValueError, match="integer string conversion"):
        str(10**3000 * 10**3000)  # Python itself will not print such an int


def test_small_integer_arithmetic_is_stock_jinjas():
    template = "{{ 2 ** 10 }} {{ 3 * 4 }} {{ (-2) ** 3 }} {{ 2 ** -1 }} {{ 10 ** 4000 > 1 }}"
    want = ImmutableSandboxedEnvironment().from_string(template).render()
    assert render_bounded(template) == want == "1024 12 -8 0.5 True"


def test_lipsum_is_no_global_any_more():
    # 49 s in one call; no chat template uses it
    t0 = time.perf_counter()
    with pytest.raises(InvalidRequestError, match="'lipsum' is undefined"):
        chat_prompt(_chat(), ByteTokenizer(), "{{ lipsum(n=1000000)|length }}")
    assert time.perf_counter() - t0 < 1.0


S = "{% set s = 'x' * 20000 %}"  # 20,000 characters: every value below is 20,000 x that


@pytest.mark.parametrize(
    "template",
    [
        S + "{{ s.replace('x', s)|length }}",
        "{% set s = '\t' * 20000 %}{{ s.expandtabs(20000)|length }}",
        S + "{{ ''.join([s] * 1000)|length }}",
        S + "{{ s.join(s)|length }}",
        S + "{{ s.translate({120: s})|length }}",
        "{{ '{:>999999999}'.format('x')|length }}",
        "{{ '{:.99999999f}'.format(1.5)|length }}",
        S + "{{ ('{0}' * 1000).format(s)|length }}",
        S + "{{ ('{a}' * 1000).format_map({'a': s})|length }}",
        S + "{{ s|replace('x', s)|length }}",
        S + "{{ ([s] * 1000)|join|length }}",
        "{% set s = '\n' * 20000 %}{{ s|indent(20000)|length }}",
        "{% set s = '\n' * 20000 %}{{ s|indent(s)|length }}",
        "{% set s = 'x ' * 20000 %}{{ s|wordwrap(1, wrapstring=s)|length }}",
        "{{ 'x'|center(999999999)|length }}",
        "{{ '%999999999s'|format('x')|length }}",
        S + "{{ ('%s' * 1000)|format(*([s] * 1000))|length }}",
        S + "{{ ([s] * 1000)|tojson|length }}",
        S + "{{ ([s] * 1000)|pprint|length }}",
        S + "{{ ([s] * 1000)|string|length }}",
        "{% set l = [0] * 2000 %}{{ ([l] * 2000)|sum(start=[])|length }}",
    ],
    ids=[
        "str.replace", "str.expandtabs", "str.join", "str.join-self", "str.translate",
        "str.format-width", "str.format-precision", "str.format-repeat", "str.format_map",
        "replace", "join", "indent", "indent-string", "wordwrap", "center", "format-width",
        "format-repeat", "tojson", "pprint", "string", "sum",
    ],
)  # fmt: skip
def test_one_call_that_grows_a_string_is_refused_before_it_is_built(template):
    _assert_refused_small(template, OVER_CHARS)


TEMPLATES = [
    "{% for m in messages %}{{ '<|' ~ m.role ~ '|>' ~ m.content ~ loop.index }}{% endfor %}",
    "{% set x %}{% for m in messages %}{{ m.content }};{% endfor %}{% endset %}[{{ x }}]",
    "{% macro t(m) %}<{{ m.role }}>{{ m.content|trim }}{% endmacro %}"
    "{% for m in messages %}{{ t(m) }}{% endfor %}",
    "{{ messages[0].content.replace('a', 'AA') }}|{{ '-'.join(['a', 'b']) }}"
    "|{{ '\tx'.expandtabs(4) }}|{{ 'ab'.translate({97: 'xy'}) }}",
    "{{ '{}:{:>6}|{:.2f}'.format(messages[0].role, 'r', 1.5) }}{{ '%5s|%-3d'|format('a', 7) }}",
    "{{ messages[0].content|replace('a', 'b') }}|{{ messages|map(attribute='role')|join(', ') }}"
    "|{{ 'a\nb'|indent(2, first=true) }}|{{ 'aa bb cc'|wordwrap(3) }}|{{ 'x'|center(5) }}",
    "{{ messages|tojson }}|{{ messages[0]|pprint }}|{{ messages }}|{{ [[1], [2]]|sum(start=[]) }}",
    "{{ messages[0].content|e }}{% autoescape true %}{{ '<b>' ~ messages[0].content }}"
    "{% endautoescape %}",
]


@pytest.mark.parametrize("template", TEMPLATES)
def test_templates_within_the_bounds_render_as_stock_jinja(template):
    messages = [{"role": "user", "content": "a <b> & 'c'"}, {"role": "assistant", "content": "ok"}]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = functools.partial(json.dumps, ensure_ascii=False)  # transformers'
    want = env.from_string(template).render(messages=messages, add_generation_prompt=True)
    assert render_bounded(template, messages=messages, add_generation_prompt=True) == want


def test_a_template_that_builds_just_under_the_budget_renders():
    # the budget is what is built: 400,000 characters output twice (as a capture, then out)
    template = "{% set x %}{{ 'y' * 400000 }}{% endset %}{{ x|length }}"
    assert render_bounded(template) == "400000"
    with pytest.raises(jinja2.TemplateError, match="Unexpected end of template"):
        render_bounded("{% for m in messages %}{{ m }}")  # a syntax error stays Jinja's
