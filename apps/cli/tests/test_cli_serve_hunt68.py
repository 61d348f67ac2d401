"""`wse infer serve` after hunt 68 (serve, round three); what was broken before:

1. A chat template that renders a sample chat without its message (one that loops over
   content parts, given a string, rendered '<user></user><assistant>') started the server,
   every chat's question silently gone; there was no --chat-template-content-format (vLLM's)
   to say how the template reads content.
3. --max-num-seqs past a model's layers was served with one slot per layer, silently: the
   log held only "serving ... on http://...".
"""

from __future__ import annotations

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line, serve_configs

pytestmark = pytest.mark.timeout(120)

ROOT = typer.main.get_command(app)
PARTS = (
    "{% for m in messages %}<{{ m['role'] }}>{% for c in m['content'] %}"
    "{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}</{{ m['role'] }}>"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
STRING = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
MOCK = ["infer", "serve", "--model-dir", "mock", "--port", "0"]


@pytest.fixture
def served(monkeypatch):
    """The ServeConfig each `wse infer serve` would serve (the server is not started)."""
    return serve_configs(monkeypatch)


def test_a_template_that_drops_the_message_is_refused_at_start(served, tmp_path):
    template = tmp_path / "parts.jinja"
    template.write_text(PARTS)
    args = [*MOCK, "--chat-template", template, "--chat-template-content-format", "string"]
    line = refused_in_one_line(ROOT, args, "")
    assert line == (
        f"Error: --chat-template {str(template)!r} renders a sample chat (one user message, "
        "'Hi') as '<user></user><assistant>', without the message's text (its content given "
        "as a string): every chat would reach the model without its messages; if the template "
        'reads message[\'content\'] as a list of {"type": "text", "text": ...} parts, give '
        "--chat-template-content-format openai, else fix the template"
    )
    roles = "{% for m in messages %}<{{ m.role }}>{% endfor %}"
    refused_in_one_line(ROOT, [*MOCK, "--chat-template", roles], "as '<user>', without the")
    assert not served


@pytest.mark.parametrize("form", [None, "auto", "openai"])
def test_a_parts_template_is_served_with_parts(served, form):
    args = [*MOCK, "--chat-template", PARTS]
    args += ["--chat-template-content-format", form] if form else []
    code, out = invoke(ROOT, args)
    assert code == 0 and out == "", out
    assert [c.chat_template_content_format for c in served] == [form or "auto"]


def test_a_format_given_against_the_detected_one_is_said_as_vllm_warns(served):
    code, out = invoke(ROOT, [*MOCK, "--chat-template", STRING,
                              "--chat-template-content-format", "openai"])  # fmt: skip
    assert code == 0 and out.splitlines() == [
        "note: --chat-template-content-format openai differs from the format detected in the "
        "chat template ('string'); leave the option out to use that one"
    ]
    assert served[0].chat_template_content_format == "openai"


def test_an_unknown_content_format_is_refused(served):
    args = [*MOCK, "--chat-template-content-format", "parts"]
    refused_in_one_line(ROOT, args, "--chat-template-content-format must be one of auto, "
                                    "string, openai, got 'parts'")  # fmt: skip
    assert not served


@pytest.mark.parametrize(("slots", "line"), [
    (3, "max_num_seqs 3 > 2 pipeline stages (one slot per layer of a 2-layer model): "
        "serving 2 slots"),
    (2, None),
])  # fmt: skip
def test_slots_past_the_pipeline_are_said_at_start(served, monkeypatch, tiny_model_dir, slots,
                                                   line):  # fmt: skip
    from wse_models import sdpa_cpu

    monkeypatch.setattr(sdpa_cpu, "compile_early", lambda *a, **k: None)  # no helper process
    args = ["infer", "serve", "--model-dir", tiny_model_dir, "--port", "0", "--max-num-seqs", slots]
    code, out = invoke(ROOT, args)
    assert code == 0, out
    assert out.splitlines() == ([line] if line else [])
    assert len(served) == 1
