"""Hunt 68 (serve, round three): what was broken before these fixes.

1. A chat template that loops over `message['content']` as a list of parts (many HF
   templates; vLLM detects them and passes parts) was given the content as one string: it
   looped over its characters and rendered every message empty ('<user></user><assistant>'),
   with a 200, and the startup sample-chat check (`template_problem`) passed it.
2. Text parts were joined with "" ("Hello" + "world" -> "Helloworld"); vLLM and TensorRT-LLM
   join them with "\\n".
3. The pipelined engine serves one slot per stage, at most one per layer: --max-num-seqs past
   a model's layers was served with fewer slots, silently, and the 400 for a large `n` blamed
   "its --max-num-seqs" for a number the user never gave.
"""

from __future__ import annotations

import httpx
import jinja2
import pytest
from wse_inference.mock import ByteTokenizer
from wse_inference.serve.admission import InvalidRequestError
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.chat_template import (
    chat_prompt,
    chat_text,
    detect_content_format,
    template_problem,
)
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)

# the hunt's template: OpenAI content parts, as multimodal models' templates read them
PARTS = (
    "{% for m in messages %}<{{ m['role'] }}>{% for c in m['content'] %}"
    "{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}</{{ m['role'] }}>"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
QUESTION = [{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}]
TWO_PARTS = [{"role": "user", "content": [{"type": "text", "text": "Hello"},
                                          {"type": "text", "text": "world"}]}]  # fmt: skip
TOK = ByteTokenizer()


def _as_vllm_renders(template: str, messages: list[dict]) -> str:
    """The oracle: plain Jinja (transformers' settings) given the parts as vLLM's "openai"
    content format gives them, a string content as one text part."""
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    parts = [
        {**m, "content": [{"type": "text", "text": m["content"]}]}
        if isinstance(m["content"], str) else m
        for m in messages
    ]  # fmt: skip
    return env.from_string(template).render(messages=parts, add_generation_prompt=True)


# --- 1: content parts ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "found"),
    [
        (PARTS, "openai"),
        ("{% for m in messages %}{{ m.role }}: {{ m['content'] }}{% endfor %}", "string"),
        # vLLM's cases: a slice through {% set %}, a filter on the loop, a string-or-parts branch
        ("{% set loop_messages = messages[1:] %}{% for message in loop_messages %}"
         "{% for c in message.content | default([]) %}{{ c.text }}{% endfor %}{% endfor %}",
         "openai"),
        ("{% for message in messages %}{% if message['content'] is string %}"
         "{{ message['content'] }}{% else %}{% for c in message['content'] %}{{ c['text'] }}"
         "{% endfor %}{% endif %}{% endfor %}", "openai"),
        ("{% set a = messages %}{% set b = a %}{% for m in b %}{% for c in m.content %}"
         "{{ c.text }}{% endfor %}{% endfor %}", "openai"),
        ("{% for m in messages %}{% for ch in m.role %}{{ ch }}{% endfor %}{% endfor %}", "string"),
        ("{% for m in messages %}", "string"),  # does not compile: its error is said elsewhere
    ],
)  # fmt: skip
def test_the_content_format_is_detected_as_vllm_detects_it(template, found):
    assert detect_content_format(template) == found


@pytest.mark.parametrize("content", ["What is 2+2?", QUESTION[0]["content"]])
def test_a_parts_template_gets_parts_and_renders_the_question(content):
    messages = [{"role": "user", "content": content}]
    text = chat_text(messages, TOK, PARTS)
    assert text == _as_vllm_renders(PARTS, messages) == "<user>What is 2+2?</user><assistant>"
    assert chat_prompt(messages, TOK, PARTS) == TOK.encode(text)
    # forced "string" is the old behaviour: the question is gone
    assert chat_text(messages, TOK, PARTS, content_format="string") == "<user></user><assistant>"


def test_a_string_template_still_gets_strings():
    template = "{% for m in messages %}[{{ m.content }}]{% endfor %}"
    assert chat_text(TWO_PARTS, TOK, template) == "[Hello\nworld]"
    parts = chat_text(TWO_PARTS, TOK, template, content_format="openai")
    assert parts == "[[{'type': 'text', 'text': 'Hello'}, {'type': 'text', 'text': 'world'}]]"


def test_apply_chat_template_gets_the_content_format_of_its_template():
    class Recording(ByteTokenizer):
        chat_template = PARTS

        def apply_chat_template(self, msgs, *, tokenize, add_generation_prompt):
            self.seen = msgs
            return "x"  # the rendered text (tokenize=False, review 82)

    tok = Recording()
    chat_prompt(TWO_PARTS, tok)
    assert tok.seen == [{"role": "user", "content": TWO_PARTS[0]["content"]}]
    chat_prompt(TWO_PARTS, tok, content_format="string")
    assert tok.seen == [{"role": "user", "content": "Hello\nworld"}]


def test_the_plain_lines_print_content_as_text_whatever_the_format():
    for form in ("auto", "string", "openai"):
        assert chat_text(TWO_PARTS, TOK, content_format=form) == "user: Hello\nworld\nassistant:"


def test_an_unknown_content_format_is_a_programming_error():
    with pytest.raises(ValueError, match="content_format must be one of"):
        chat_text(QUESTION, TOK, PARTS, content_format="parts")


def test_the_startup_check_refuses_a_render_without_the_message():
    assert template_problem(TOK, PARTS, PARTS) is None  # detected: the parts are passed
    why = template_problem(TOK, PARTS, PARTS, "string")
    assert why == (
        "--chat-template renders a sample chat (one user message, 'Hi') as "
        "'<user></user><assistant>', without the message's text (its content given as a "
        "string): every chat would reach the model without its messages; if the template "
        'reads message[\'content\'] as a list of {"type": "text", "text": ...} parts, give '
        "--chat-template-content-format openai, else fix the template"
    )
    roles_only = "{% for m in messages %}{{ m.role }}{% endfor %}"
    assert "as 'user', without the message's text" in template_problem(TOK, roles_only, "x")


def test_the_startup_check_names_the_model_folders_template(tmp_path):
    from wse_inference.model_dir import HFTokenizer
    from wse_inference.testing import save_byte_bpe

    save_byte_bpe(tmp_path / "tokenizer.json")
    (tmp_path / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m.role }}>{% endfor %}"
    )
    why = template_problem(HFTokenizer(tmp_path / "tokenizer.json"), None, None)
    assert why.startswith(
        f"the chat template of {str(tmp_path / 'chat_template.jinja')!r} renders a sample chat "
        "(one user message, 'Hi') as '<user>', without the message's text"
    )


def _tokenize_text(url: str, messages: list[dict]) -> str:
    r = httpx.post(url + "/tokenize", json={"messages": messages})
    assert r.status_code == 200, r.text
    d = httpx.post(url + "/detokenize", json={"tokens": r.json()["tokens"]})
    return d.json()["prompt"]


def test_served_chat_with_a_parts_template_keeps_the_question():
    with running_server(chat_template=PARTS, max_slots=2) as s:
        want = _as_vllm_renders(PARTS, QUESTION)
        assert (
            _tokenize_text(s.http_url, QUESTION) == want == "<user>What is 2+2?</user><assistant>"
        )
        body = {"model": "mock", "messages": QUESTION, "max_tokens": 2}
        r = httpx.post(s.http_url + "/v1/chat/completions", json=body)
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == len(TOK.encode(want))


def test_the_servers_content_format_reaches_every_chat_route():
    from wse_inference.mock import MockEngine

    config = ServeConfig(port=0, chat_template=PARTS, chat_template_content_format="string")
    server = Server(MockEngine(max_slots=2), config).start()
    try:  # forced "string": the template loops over characters, as before the fix
        assert _tokenize_text(server.http_url, QUESTION) == "<user></user><assistant>"
        body = {"model": "mock", "messages": QUESTION, "max_tokens": 1}
        r = httpx.post(server.http_url + "/v1/chat/completions", json=body)
        assert r.json()["usage"]["prompt_tokens"] == len("<user></user><assistant>")
    finally:
        server.close()


# --- 2: parts joined with "\n" ------------------------------------------------------------------
def test_text_parts_are_joined_with_a_newline_as_vllm_joins_them():
    assert chat_text(TWO_PARTS, TOK) == "user: Hello\nworld\nassistant:"
    with running_server(max_slots=2) as s:
        assert _tokenize_text(s.http_url, TWO_PARTS) == "user: Hello\nworld\nassistant:"


def test_a_bad_part_is_still_refused():
    bad = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]}]
    with pytest.raises(InvalidRequestError, match=r"messages\[0\]\.content\[1\] is a 'image_url'"):
        chat_text(bad, TOK, PARTS)


# --- 3: the slots in force ----------------------------------------------------------------------
def test_the_slot_cap_line():
    from wse_inference.load import pipeline_stages, slot_cap_line

    assert [pipeline_stages(s, 32) for s in (1, 8, 32, 256)] == [1, 8, 32, 32]
    assert slot_cap_line(256, 32) == (
        "max_num_seqs 256 > 32 pipeline stages (one slot per layer of a 32-layer model): "
        "serving 32 slots"
    )
    assert slot_cap_line(2, 1) == (
        "max_num_seqs 2 > 1 pipeline stages (one slot per layer of a 1-layer model): serving 1 slot"
    )
    assert slot_cap_line(32, 32) is None and slot_cap_line(4, 32) is None


def test_the_n_refusal_names_the_pipelines_slots(tmp_path):
    """The hunt's server: a 1-layer model asked for 2 slots serves 1; n = 4 is more than the
    1 slot + 2 queued, and the 400 says where the 1 comes from."""
    from wse_core import preset
    from wse_inference.load import load_engine
    from wse_inference.testing import save_byte_bpe, save_tiny_model

    save_tiny_model(tmp_path, n_layers=1)
    save_byte_bpe(tmp_path / "tokenizer.json")
    engine = load_engine(str(tmp_path), spec=preset("wse3"), max_slots=2, max_context=32)
    assert engine.max_slots == 1
    server = Server(engine, ServeConfig(port=0, max_queued=2, drain_s=1)).start()
    try:
        assert httpx.get(server.http_url + "/health").json()["max_slots"] == 1
        body = {"model": engine.model_name, "prompt": "hi", "max_tokens": 2, "n": 4}
        r = httpx.post(server.http_url + "/v1/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "n"
        assert r.json()["error"]["message"] == (
            "n = 4 choices run as 4 requests at once; this server holds at most 3 (1 decode "
            "slot + 2 queued: one slot per pipeline stage (--max-num-seqs, capped at the "
            "model's 1 layer), and its --max-queued). Ask for n <= 3, or send several requests."
        )
    finally:
        server.close()


def test_the_n_refusal_of_an_engine_without_stages_names_max_num_seqs():
    with running_server(max_slots=2, max_queued=1) as s:
        body = {"model": "mock", "prompt": "hi", "max_tokens": 2, "n": 4}
        message = httpx.post(s.http_url + "/v1/completions", json=body).json()["error"]["message"]
        assert "at most 3 (2 decode slots + 1 queued: its --max-num-seqs, and its --max-queued)" \
            in message  # fmt: skip
