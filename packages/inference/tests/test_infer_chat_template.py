"""Chat templates of HF-format directories, against transformers' apply_chat_template, and the
server's --chat-template override."""

from __future__ import annotations

import json

import httpx
import pytest
from wse_inference.mock import ByteTokenizer, expected_continuation
from wse_inference.model_dir import HFTokenizer
from wse_inference.serve.admission import InvalidRequestError
from wse_inference.serve.openai_request import chat_prompt
from wse_inference.serve.testing import running_server

SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
# Llama-3-like, with block tags on their own indented lines (trim_blocks / lstrip_blocks
# matter) and a raise_exception
TEMPLATE = """{{ bos_token }}
{% for message in messages %}
    {% if message['role'] == 'assistant' and loop.first %}
        {{ raise_exception('the first message must not be the assistant') }}
    {% endif %}
<|start_header_id|>{{ message['role'] }}<|end_header_id|>

{{ message['content'] | trim }}<|eot_id|>
{% endfor %}
{% if add_generation_prompt %}
<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""
MESSAGES = [
    {"role": "system", "content": "Be brief. "},
    {"role": "user", "content": "hello wafer"},
    {"role": "assistant", "content": "the chip"},
    {"role": "user", "content": "be brief, world"},
]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """tokenizer.json (a small byte-level BPE) + tokenizer_config.json with the template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["hello world, be brief. the wafer is a chip"] * 20, trainer)
    folder = tmp_path_factory.mktemp("hf")
    tok.save(str(folder / "tokenizer.json"))
    bos = {"__type": "AddedToken", "content": SPECIALS[0], "lstrip": False, "rstrip": False}
    bos |= {"normalized": False, "single_word": False, "special": True}
    config = {"bos_token": bos, "eos_token": SPECIALS[3], "chat_template": TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _transformers_ids(folder, messages):
    transformers = pytest.importorskip("transformers")
    tok = transformers.PreTrainedTokenizerFast.from_pretrained(str(folder))
    out = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def test_an_hf_directory_template_gives_transformers_ids(hf_dir):
    tok = HFTokenizer(hf_dir / "tokenizer.json")
    assert tok.template_vars == {"bos_token": SPECIALS[0], "eos_token": SPECIALS[3]}
    ids = chat_prompt(MESSAGES, tok)
    assert ids == _transformers_ids(hf_dir, MESSAGES)
    assert ids[0] == tok.vocab()[SPECIALS[0]]  # the bos text became its special id
    assert tok.decode(ids).endswith("be brief, world\nassistant\n\n")  # no special tokens


def test_the_template_transformers_saves_is_read_back(hf_dir, tmp_path):
    # transformers writes the template as chat_template.jinja beside tokenizer_config.json
    transformers = pytest.importorskip("transformers")
    transformers.PreTrainedTokenizerFast.from_pretrained(str(hf_dir)).save_pretrained(tmp_path)
    tok = HFTokenizer(tmp_path / "tokenizer.json")
    assert tok.chat_template is not None
    assert chat_prompt(MESSAGES, tok) == _transformers_ids(hf_dir, MESSAGES)


def test_named_templates_use_default_and_no_template_is_plain(hf_dir, tmp_path):
    (tmp_path / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    named = [{"name": "tool_use", "template": "x"}, {"name": "default", "template": TEMPLATE}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}))
    assert HFTokenizer(tmp_path / "tokenizer.json").chat_template == TEMPLATE
    (tmp_path / "tokenizer_config.json").unlink()
    tok = HFTokenizer(tmp_path / "tokenizer.json")
    assert tok.chat_template is None
    assert tok.decode(chat_prompt(MESSAGES[1:2], tok)) == "user: hello wafer\nassistant:"


def test_raise_exception_in_a_template_is_a_400_with_its_message(hf_dir):
    tok = HFTokenizer(hf_dir / "tokenizer.json")
    with pytest.raises(InvalidRequestError, match="must not be the assistant") as e:
        chat_prompt(MESSAGES[2:], tok)
    assert e.value.param == "messages"


def test_the_server_template_overrides_the_tokenizers():
    template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}=>"
    body = {"model": "mock", "messages": MESSAGES[1:2], "max_tokens": 5}
    with running_server(chat_template=template, max_slots=2, step_delay_s=0.001) as s:
        r = httpx.post(s.http_url + "/v1/chat/completions", json=body, timeout=10).json()
        bad = {**body, "messages": [{"role": "user", "content": "{{"}]}
        ok = httpx.post(s.http_url + "/v1/chat/completions", json=bad, timeout=10)
    prompt = ByteTokenizer().encode("[user]hello wafer=>")  # rendered by hand
    assert r["usage"]["prompt_tokens"] == len(prompt)
    want = ByteTokenizer().decode(expected_continuation(prompt, 5))
    assert r["choices"][0]["message"]["content"] == want
    assert ok.status_code == 200  # content is data, not template code


BOMBS = {
    "output": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "silent": "{% for i in range(100000) %}{% for j in range(100000) %}{% set k = j %}"
    "{% endfor %}{% endfor %}",
    "one huge range": "{% for i in range(10 ** 12) %}{% endfor %}",
    # hunt 58b: one operation that builds a huge value (1.2 GB for 'x' * 300000000)
    "one string": "{{ 'x' * 300000000 }}",
    "one list": "{{ [0] * 100000000 }}",
    "a method's width": "{{ 'x'.ljust(300000000) }}",
    "a filter's width": "{{ 'x' | center(300000000) }}",
    "a format's width": "{{ '%0300000000d' % 1 }}",
    "doubling": "{% set ns = namespace(s='x') %}{% for i in range(40) %}"
    "{% set ns.s = ns.s + ns.s %}{% endfor %}",
}


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_a_template_bomb_is_a_400_within_the_limits_while_health_answers(bomb):
    """The render is charged per call, output chunk and range step: a bomb stops at the
    operation limit (the issue's template took 8.4 GB and ignored SIGTERM)."""
    import resource
    import time

    body = {"model": "mock", "messages": MESSAGES[1:2], "max_tokens": 2}
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with running_server(chat_template=BOMBS[bomb], max_slots=1, step_delay_s=0.001) as s:
        t0 = time.perf_counter()
        r = httpx.post(s.http_url + "/v1/chat/completions", json=body, timeout=30)
        wall_s = time.perf_counter() - t0
        health = httpx.get(s.http_url + "/health", timeout=5)
    assert r.status_code == 400 and "WSE_LIMIT_TEMPLATE" in r.json()["error"]["message"]
    assert health.status_code == 200
    assert wall_s < 2 * 2.0 + 1  # the 2 s time limit, on a machine shared 2-4x
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200 * 1024  # KiB


@pytest.mark.parametrize(
    "template, error",
    [
        ("{{ 10 // (messages | length - 1) }}", "ZeroDivisionError"),
        ("{{ messages[0]['content'] + 1 }}", "TypeError"),
        ("{{ '%d' % messages[0]['content'] }}", "TypeError"),
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
    ],
)
def test_a_templates_python_error_on_these_messages_is_a_400_naming_it(template, error):
    # hunt 58b: each was a 500 "internal error: ZeroDivisionError" and a logged traceback
    body = {"model": "mock", "messages": MESSAGES[1:2], "max_tokens": 2}
    with running_server(chat_template=template) as s:
        r = httpx.post(s.http_url + "/v1/chat/completions", json=body, timeout=30)
        health = httpx.get(s.http_url + "/health", timeout=5)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "messages" and f"cannot render these messages: {error}" in err["message"]
    assert health.status_code == 200
