"""Hunt 70, the detokenizer's follow-ups: `wse infer generate`, the mock and logprobs tokens.

Broken before:
1. `wse infer generate` (pipelined and speculative) built its `SequenceTracker` without the
   prompt, so with a "▁" (Llama-2 / Mistral) tokenizer its text lacked the leading space of
   the first word that `wse infer serve` gives for the same seed (and vLLM, offline and
   served): " hello world the quick..." came out "hello world the quick...";
2. the mock engine matched stop strings on a whole decode with its own copy of the logic:
   stop "p\\ufffd" ended a sequence at the half-arrived "ѽ" of "pѽr" (the text never holds
   "p\\ufffd"), and a speculative step ran past a stop string;
3. /v1/completions' `logprobs.tokens` decoded each token alone, so a "▁" word lost its space
   and `text_offset` disagreed with the text (" hello world the qu" was "hello world the qu").
   vLLM restores a SentencePiece piece's leading spaces from its raw vocabulary piece
   (`convert_ids_list_to_tokens`, vLLM PR #48674): the oracle here does the same with
   transformers' `convert_ids_to_tokens`.

Oracle: transformers' `decode(prompt + output, skip_special_tokens=True)` less the prompt's
text, on a tokenizer built as Llama-2's tokenizer.json is (Prepend/Replace "▁", byte fallback,
decoder Replace, ByteFallback, Fuse, Strip(" ", 1, 0)).
"""

from __future__ import annotations

import json

import httpx
import pytest
import typer
from tokenizers import Tokenizer, models
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_core import preset
from wse_inference.engine import SamplingParams
from wse_inference.hf_tokenizer import HFTokenizer
from wse_inference.load import load_engine
from wse_inference.mock import MockEngine
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.testing import (
    LLAMA2_BYTES,
    llama2_bpe,
    llama2_decoder,
    one_request,
    save_tiny_model,
)

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
BYTES = LLAMA2_BYTES
LLAMA2_DECODER = llama2_decoder()  # Llama-2's own tokenizer.json decoder
GREEDY = {"prompt": "hello the", "max_tokens": 6, "temperature": 0.0}
SAMPLED = {"prompt": "hello", "max_tokens": 6, "temperature": 1.0, "seed": 14}


def _llama2_tokenizer() -> Tokenizer:
    return llama2_bpe(["hello world the quick brown fox jumps over the lazy dog " * 5,
                       "héllo wörld ünïcode text " * 5])  # fmt: skip


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(a tiny random Llama with a Llama-2 style tokenizer, transformers' tokenizer of it)."""
    folder = tmp_path_factory.mktemp("models") / "m"
    folder.mkdir()
    tok = _llama2_tokenizer()
    tok.save(str(folder / "tokenizer.json"))
    save_tiny_model(folder, n_layers=2, vocab_size=tok.get_vocab_size())
    oracle = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    return folder, oracle


@pytest.fixture(scope="module")
def served(model):
    """The pipelined server's whole completions of GREEDY (with logprobs, and echoed) and of
    SAMPLED, from one server over the model."""
    folder, _ = model
    engine = load_engine(str(folder), spec=preset("wse3"), max_slots=1)
    server = Server(engine, ServeConfig(port=0, grpc_port=0)).start()
    try:
        post = lambda body: _completion(server, body)  # noqa: E731
        ids = post({**GREEDY, "logprobs": 0, "return_tokens_as_token_ids": True})
        yield {"greedy": post({**GREEDY, "logprobs": 1}), "sampled": post(SAMPLED),
               "echo": post({**GREEDY, "logprobs": 0, "echo": True}),
               "ids": [int(t.split(":")[1]) for t in ids["logprobs"]["tokens"]]}  # fmt: skip
    finally:
        server.close()


def _completion(server, body: dict) -> dict:
    r = httpx.post(server.http_url + "/v1/completions", json={"model": "m", **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def _generate(folder, body: dict, *extra: str) -> dict:
    args = ["--prompt", body["prompt"], "--max-tokens", str(body["max_tokens"]),
            "--temperature", str(body["temperature"])]  # fmt: skip
    if "seed" in body:
        args += ["--seed", str(body["seed"])]
    code, out = invoke(ROOT, ["infer", "generate", "--model-dir", folder, *args, *extra, "--json"])
    assert code == 0, out[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def _after_prompt(oracle, prompt: str, out: list[int]) -> str:
    ids = oracle(prompt).input_ids
    text = lambda x: oracle.decode(x, skip_special_tokens=True)  # noqa: E731
    return text(ids + out)[len(text(ids)) :]


@pytest.mark.parametrize(
    "body,extra",
    [(SAMPLED, ()),
     (GREEDY, ("--speculative-config", '{"model": "SELF", "num_speculative_tokens": 2}'))],
    ids=["pipelined", "speculative"],
)  # fmt: skip
def test_generate_text_is_the_servers_and_transformers(model, served, body, extra):
    """Speculative decoding samples by its own rounds, so it is compared greedy, where its
    tokens are the target's alone: the pipelined server's."""
    folder, oracle = model
    extra = tuple(x.replace("SELF", str(folder)) for x in extra)  # the model drafts for itself
    got = _generate(folder, body, *extra)
    want = _after_prompt(oracle, body["prompt"], got["token_ids"])
    assert want.startswith(" ") and want[1:2].isalpha()  # the case: a "▁" word comes first
    assert got["text"] == want  # before: without its first space
    if body is GREEDY:
        assert got["token_ids"] == served["ids"]
    assert served["sampled" if body is SAMPLED else "greedy"]["text"] == want


def _vllm_token(oracle, token: int) -> str:
    """vLLM's logprobs token text: decoded alone, the raw piece's leading "▁"s as spaces
    (special tokens as "", the server's choice: here the byte tokens, as in the hunt's)."""
    text = oracle.decode([token], skip_special_tokens=True)
    piece = oracle.convert_ids_to_tokens([token])[0]
    missing = (len(piece) - len(piece.lstrip("▁"))) - (len(text) - len(text.lstrip(" ")))
    return " " * max(missing, 0) + text


def test_logprobs_tokens_keep_their_spaces_and_offsets_agree_with_the_text(model, served):
    _, oracle = model
    choice, ids = served["greedy"], served["ids"]
    lp, text = choice["logprobs"], choice["text"]
    assert lp["tokens"] == [_vllm_token(oracle, t) for t in ids]
    assert lp["tokens"][0].startswith(" ")  # before: "hello world the qu"
    assert "".join(lp["tokens"]) == text
    assert lp["text_offset"] == [len("".join(lp["tokens"][:i])) for i in range(len(ids))]
    assert [list(top) for top in lp["top_logprobs"]] == [[t] for t in lp["tokens"]]  # greedy
    echo = served["echo"]  # the prompt's text, then the completion's
    tokens, starts = echo["logprobs"]["tokens"], echo["logprobs"]["text_offset"]
    prompt = oracle(GREEDY["prompt"]).input_ids
    first = oracle.decode(prompt[:1], skip_special_tokens=True)
    want = [first, *(_vllm_token(oracle, t) for t in prompt[1:] + ids)]
    assert (echo["text"], tokens) == (GREEDY["prompt"] + text, want)
    assert [echo["text"][a:b] for a, b in zip(starts, [*starts[1:], None], strict=True)] == tokens


@pytest.fixture
def mock_pr(tmp_path):
    """The mock over a Llama-2 style table ordered by hand, so its `last + 1` ids after
    "▁hello" spell "p", "<0xD1>", "<0xBD>", "r": "pѽr", "ѽ" in two byte tokens."""
    names = ["<unk>", "<s>", "</s>", "▁hello", "p", "<0xD1>", "<0xBD>", "r", "▁the"]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(names)}, merges=[],
                               unk_token="<unk>", byte_fallback=True))  # fmt: skip
    tok.decoder = LLAMA2_DECODER
    tok.add_special_tokens(names[:3])
    tok.save(str(tmp_path / "tokenizer.json"))
    engine = MockEngine()
    engine.tokenizer, engine.vocab_size = HFTokenizer(tmp_path / "tokenizer.json"), len(names)
    oracle = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    return engine, oracle


def test_the_mock_never_stops_on_the_fffd_of_a_character_still_arriving(mock_pr):
    engine, oracle = mock_pr
    out = [4, 5, 6, 7]
    assert oracle.decode(out) == "pѽr" and oracle.decode(out[:2]) == "p\ufffd"  # the case
    stop = SamplingParams(max_tokens=4, stop=("p\ufffd",))
    assert one_request(engine, [3], stop) == (out, "length")  # before: ([4, 5], "stop")
    server = Server(engine, ServeConfig(port=0, grpc_port=0)).start()
    try:
        body = {"prompt": [3], "max_tokens": 4, "stop": ["p\ufffd"]}
        r = httpx.post(server.http_url + "/v1/completions", json={"model": "mock", **body})
    finally:
        server.close()
    choice, usage = r.json()["choices"][0], r.json()["usage"]
    assert (choice["text"], choice["finish_reason"]) == ("pѽr", "length")  # before: "", stop
    assert usage["completion_tokens"] == 4  # before: 2


def test_a_speculative_mock_step_ends_at_its_stop_string():
    """As the speculative engine's round: tokens after the stop are not emitted (nor counted)."""
    engine = MockEngine(spec_tokens=4, spec_accepted=3)  # 4 tokens a step after the prefill's
    tokens, reason = one_request(engine, list(b"abc"), SamplingParams(max_tokens=20, stop=("ef",)))
    assert (bytes(tokens), reason) == (b"def", "stop")  # before: b"defgh", the step's all
