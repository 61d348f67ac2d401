"""vLLM's `min_tokens` and `include_stop_str_in_output` on /v1/completions, /v1/chat/completions
(streamed and not), gRPC `Generate` and `wse infer generate` (session 80). Before, both were a
400 "not supported by this server", though vLLM users pass them routinely (lm-eval, RL
rollouts, chat front ends that keep the stop marker).

vLLM's rules (vllm/sampling_params.py, v1/sample/logits_processor MinTokensLogitsProcessor,
v1/engine/detokenizer.py `update`, v1/core/sched/utils.py `check_stop`):
- min_tokens: the stop token ids and the model's EOS ids (all_stop_token_ids: also under
  ignore_eos) get logit -inf until min_tokens tokens are made; no stop string is matched that
  ends in the text of those first min_tokens tokens (one may begin there); 0 <= min_tokens <=
  max_tokens, refused in vLLM's words;
- include_stop_str_in_output: the text is cut after the stop string instead of before it, and
  a stop token's own text is kept (none for a special token), nothing held back while
  streaming.

Oracles: the mock engine's continuation (prompt's last byte + 1, + 2, ...; with min_tokens a
held id is skipped: its most likely other token), so every expected text is written by hand;
for a real tiny model, NumPy greedy decoding with the EOS logit at -inf for the first
min_tokens steps (`np_held_greedy`, one parallel forward a step).
"""

from __future__ import annotations

import json

import grpc
import httpx
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_core import preset
from wse_inference.engine import SamplingParams
from wse_inference.load import load_engine
from wse_inference.model_dir import load_model
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import running_server
from wse_inference.serve.text_stream import TextStream
from wse_inference.testing import np_held_greedy, one_request, save_tiny_model

pytestmark = pytest.mark.timeout(300)
pb2, pb2_grpc = load_stubs()
C, CHAT = "/v1/completions", "/v1/chat/completions"
ROOT = typer.main.get_command(app)


@pytest.fixture(scope="module")
def server():
    with running_server(grpc=True, max_slots=2, max_context=128) as s:
        yield s


def _post(server, route: str, body: dict) -> dict:
    r = httpx.post(server.http_url + route, json={"model": "mock", **body}, timeout=30)
    assert r.status_code == 200, r.text[:300]
    return r.json()["choices"][0]


def _streamed(server, route: str, body: dict) -> tuple[list[str], dict]:
    """The text of each streamed chunk, and the last chunk's choice."""
    texts, last = [], {}
    body = {"model": "mock", **body, "stream": True}
    with httpx.stream("POST", server.http_url + route, json=body, timeout=30) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:])["choices"]
            if choices:
                last = choices[0]
                texts.append(last["delta"].get("content") or "" if route == CHAT else last["text"])
    return texts, last


# "abc" continues "defghijk..." (the mock: the last byte + 1 each token)
@pytest.mark.parametrize(
    "extra, text, finish, reason",
    [
        ({"stop": ["e"]}, "d", "stop", "e"),  # as before
        ({"stop": ["e"], "include_stop_str_in_output": True}, "de", "stop", "e"),
        ({"stop": ["fg"], "include_stop_str_in_output": True}, "defg", "stop", "fg"),
        # min_tokens 3: "e" ends in the first 3 tokens' text ("def"): never matched
        ({"stop": ["e"], "min_tokens": 3}, "defghijk", "length", None),
        # "ef" ends at the 3rd token's text: not past it either
        ({"stop": ["ef"], "min_tokens": 3}, "defghijk", "length", None),
        # "fg" begins in "def" and ends in the 4th token's text: matched (vLLM's window)
        ({"stop": ["fg"], "min_tokens": 3}, "de", "stop", "fg"),
        ({"stop": ["fg"], "min_tokens": 3, "include_stop_str_in_output": True}, "defg", "stop",
         "fg"),
        # stop token "f" (102): its text kept with include_stop_str_in_output
        ({"stop_token_ids": [102]}, "de", "stop", 102),
        ({"stop_token_ids": [102], "include_stop_str_in_output": True}, "def", "stop", 102),
        # min_tokens 4 holds "f" back (the mock's next most likely token is "g"); "f" never
        # comes again in 8 tokens
        ({"stop_token_ids": [102], "min_tokens": 4}, "deghijkl", "length", None),
        # min_tokens 1: "d" is the 1st token, "f" the 3rd: not held, it stops
        ({"stop_token_ids": [102], "min_tokens": 1}, "de", "stop", 102),
        ({"min_tokens": 8}, "defghijk", "length", None),
    ],
)  # fmt: skip
def test_completions_streamed_or_not_follow_vllms_rules(server, extra, text, finish, reason):
    body = {"prompt": "abc", "max_tokens": 8, "temperature": 0, **extra}
    c = _post(server, C, body)
    assert (c["text"], c["finish_reason"], c["stop_reason"]) == (text, finish, reason)
    chunks, last = _streamed(server, C, body)
    assert "".join(chunks) == text and last["finish_reason"] == finish


def test_chat_takes_both_streamed_or_not(server):
    msgs = [{"role": "user", "content": "hi"}]
    ids = httpx.post(server.http_url + "/tokenize", json={"model": "mock", "messages": msgs},
                     timeout=30).json()["tokens"]  # fmt: skip
    b = ids[-1]  # the chat prompt's last byte: the answer is b + 1, b + 2, ...
    stop = b + 2
    body = {"messages": msgs, "max_tokens": 5, "stop_token_ids": [stop], "min_tokens": 3}
    want = bytes([b + 1, b + 3, b + 4, b + 5, b + 6]).decode()  # b + 2 held back, then absent
    c = _post(server, CHAT, body)
    assert (c["message"]["content"], c["finish_reason"]) == (want, "length")
    chunks, last = _streamed(server, CHAT, body)
    assert "".join(chunks) == want and last["finish_reason"] == "length"
    kept = {"messages": msgs, "max_tokens": 5, "stop_token_ids": [stop],
            "include_stop_str_in_output": True}  # fmt: skip
    c = _post(server, CHAT, kept)
    assert c["message"]["content"] == bytes([b + 1, b + 2]).decode() and c["stop_reason"] == stop
    chunks, _ = _streamed(server, CHAT, kept)
    assert "".join(chunks) == bytes([b + 1, b + 2]).decode()


def test_min_tokens_past_the_default_max_tokens_is_refused_in_vllms_words(server):
    r = httpx.post(server.http_url + C, json={"model": "mock", "prompt": "abc",
                                              "min_tokens": 17}, timeout=30)  # fmt: skip
    assert r.status_code == 400  # /v1/completions' max_tokens is 16 when left out, as vLLM's
    err = r.json()["error"]
    assert err["message"] == "min_tokens must be less than or equal to max_tokens=16, got 17."
    assert err["param"] == "min_tokens"


def test_grpc_takes_both(server):
    with grpc.insecure_channel(server.grpc_target) as channel:
        st = pb2_grpc.GenerationStub(channel)

        def run(**kw):
            out = list(st.Generate(pb2.GenerateRequest(text="abc", max_tokens=8, **kw),
                                   timeout=10))  # fmt: skip
            return "".join(r.text for r in out), out[-1].finish_reason

        assert run(stop=["fg"], include_stop_str_in_output=True) == ("defg", "stop")
        assert run(stop=["fg"], min_tokens=3) == ("de", "stop")
        assert run(stop=["ef"], min_tokens=3) == ("defghijk", "length")
        assert run(stop_token_ids=[102], min_tokens=4) == ("deghijkl", "length")
        assert run(stop_token_ids=[102], include_stop_str_in_output=True) == ("def", "stop")
        with pytest.raises(grpc.RpcError) as e:
            run(min_tokens=9)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == "min_tokens must be less than or equal to max_tokens=8, got 9."


class _Bytes:
    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


def test_with_include_stop_str_in_output_nothing_is_held_back():
    """vLLM's stop_buffer_length is 0 when the stop string is kept: "ax" with stop "xyz" is
    sent whole at once (without it, its last 2 characters wait: they may begin the stop)."""
    kept = TextStream(_Bytes(), stop=["xyz"], include_stop=True)
    held = TextStream(_Bytes(), stop=["xyz"])
    assert kept.push(list(b"ax")) == ("ax", False) and held.push(list(b"ax")) == ("", False)
    assert kept.push(list(b"yzq")) == ("yz", True) and held.push(list(b"yzq")) == ("a", True)
    assert kept.text == "axyz" and held.text == "a"


def test_a_stop_string_straddling_min_tokens_is_matched_and_one_inside_is_not():
    """The stream alone, by hand: tokens "a", "b", "c", "d" with min_tokens 2 ("ab"): "ab"
    ends in it (never matched), "bc" begins in it and ends after (matched)."""
    for stop, text, reason in (("ab", "abcd", None), ("bc", "a", "bc")):
        s = TextStream(_Bytes(), stop=[stop], min_tokens=2)
        out, stopped = s.push(list(b"abcd"))
        assert (out + (s.flush() if not stopped else ""), s.stop_reason) == (text, reason)


# -- a real tiny model: its EOS held back ----------------------------------------------------
PROMPT = [72, 105, 32]  # "Hi "
MAX_TOKENS = 12


def test_a_models_eos_is_held_back_on_the_server_and_in_generate(tmp_path):
    """The model's EOS ids (generation_config.json's): the free run's token at k >= 2, and
    the first token the run holding it back makes from min_tokens on that it made in none of
    its held steps (so holding it back too changes none of them), so that the sequence stops
    on an EOS after min_tokens."""
    save_tiny_model(tmp_path, n_layers=1)
    greedy = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0)
    engine = load_engine(str(tmp_path), spec=preset("wse3"), max_slots=1, max_context=32)
    free, _ = one_request(engine, PROMPT, greedy)
    model = load_model(tmp_path)
    assert np_held_greedy(model, PROMPT, MAX_TOKENS, (), 0, ()) == free  # the oracle's own
    k = next((k for k in range(2, len(free)) if free[k] not in free[:k]), None)
    m = (k or 0) + 2
    first = np_held_greedy(model, PROMPT, MAX_TOKENS, {free[k or 0]}, m, ())
    j = next((j for j in range(m, MAX_TOKENS) if first[j] not in first[:m]), None)
    if k is None or j is None:
        pytest.skip("no EOS pair: the greedy output repeats its tokens")
    eos = tuple(dict.fromkeys((free[k], first[j])))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": list(eos)}))
    want = np_held_greedy(model, PROMPT, MAX_TOKENS, set(eos), m, set(eos))
    ignoring = np_held_greedy(model, PROMPT, MAX_TOKENS, set(eos), m, ())  # ignore_eos
    assert want == first[: len(want)] and want[k] != free[k]  # held at k
    assert want[-1] in eos and len(want) > m  # stopped on an EOS after min_tokens
    assert ignoring[: len(want)] == want and ignoring != free
    tok = model.tokenizer  # bytes: a token is a byte of UTF-8 text

    def shown(ids: list[int]) -> str:
        """The text of `ids` at a stop: vLLM's detokenizer holds text that ends in U+FFFD (a
        character maybe still arriving) and nothing follows a stop, so it is the text of the
        most tokens whose text does not end in U+FFFD."""
        texts = (bytes(ids[:n]).decode("utf-8", "replace") for n in range(len(ids), -1, -1))
        return next(t for t in texts if not t.endswith("\ufffd"))

    engine = load_engine(str(tmp_path), spec=preset("wse3"), max_slots=1, max_context=32)
    server = Server(engine, ServeConfig(port=0, warmup=False)).start()
    try:

        def ask(**kw):
            body = {"model": engine.model_name, "prompt": tok.decode(PROMPT), "temperature": 0,
                    "max_tokens": MAX_TOKENS, "return_token_ids": True, **kw}  # fmt: skip
            r = httpx.post(server.http_url + C, json=body, timeout=120)
            assert r.status_code == 200, r.text[:300]
            return r.json()["choices"][0]

        before = ask()  # without min_tokens: the EOS at k stops it
        assert before["token_ids"] == free[: k + 1] and before["finish_reason"] == "stop"
        c = ask(min_tokens=m)
        assert (c["token_ids"], c["finish_reason"], c["text"]) == (want, "stop", shown(want[:-1]))
        # the EOS's own text kept with include_stop_str_in_output (a byte here, shown once
        # it completes a character)
        assert ask(min_tokens=m, include_stop_str_in_output=True)["text"] == shown(want)
        # ignore_eos: the EOS ids are still held back for min_tokens (all_stop_token_ids)
        assert ask(ignore_eos=True)["token_ids"] == free
        assert ask(min_tokens=m, ignore_eos=True)["token_ids"] == ignoring
    finally:
        server.close()

    args = ["infer", "generate", "--model-dir", tmp_path, "--prompt", tok.decode(PROMPT),
            "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--min-tokens", str(m),
            "--json"]  # fmt: skip
    code, out = invoke(ROOT, args)
    assert code == 0, out[-2000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert (got["token_ids"], got["text"]) == (want, shown(want[:-1]))
    code, out = invoke(ROOT, [*args[:-1], "--include-stop-str-in-output", "--json"])
    assert code == 0, out[-2000:]
    assert json.loads(out.strip().splitlines()[-1])["text"] == shown(want)


def test_generate_refuses_min_tokens_past_max_tokens_in_one_line(tmp_path):
    from wse_cli.testing import refused_in_one_line

    args = ["infer", "generate", "--model-dir", tmp_path, "--prompt", "hi", "--max-tokens", "3",
            "--min-tokens", "4"]  # fmt: skip
    refused_in_one_line(ROOT, args, "min_tokens must be less than or equal to max_tokens=3")
