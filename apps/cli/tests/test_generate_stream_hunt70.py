"""Hunt 70: what `wse infer generate` prints as it streams (without --json) against its --json
text. Broken before: the loop printed the whole decode's new characters, so
3. a character split across tokens was printed as U+FFFD and never printed right (the
   completed character is as long as the U+FFFD it replaces: "Tp\\ufffdbr" for "Tpѽbr");
4. the start of a stop string was printed before the stop completed ("…KM" for "…" + "KMR")
   and never taken back;
5. a stop string was matched on the U+FFFD of a character still arriving ("n\\ufffd" stopped a
   sequence whose final text holds "nÉ", never "n\\ufffd").
Now the tracker's text is the server's `TextStream`: final text only, stops on final text."""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_inference.model_dir import read_tokenizer
from wse_inference.testing import save_byte_bpe, save_tiny_model

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
TEXTS = ("hello world the quick brown fox", "héllo wörld ünïcode 日本語 text")
SAMPLED = ("--prompt", "héllo wörld", "--max-tokens", "30", "--temperature", "1", "--seed", "1")
GREEDY = ("--prompt", "hello world", "--max-tokens", "12", "--temperature", "0")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny random Llama with a byte-level BPE (GPT-2 / Llama-3 style) tokenizer."""
    folder = tmp_path_factory.mktemp("models") / "m"
    save_tiny_model(folder, n_layers=2, vocab_size=300)
    save_byte_bpe(folder / "tokenizer.json", vocab_size=300, texts=TEXTS)
    return folder


def _json(model, *args) -> dict:
    code, out = invoke(ROOT, ["infer", "generate", "--model-dir", model, *args, "--json"])
    assert code == 0, out[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def _printed(model, *args) -> str:
    """The text the run prints as it streams (before the report's lines)."""
    code, out = invoke(ROOT, ["infer", "generate", "--model-dir", model, *args])
    assert code == 0, out[-2000:]
    return out[: out.rindex("\n[pipelined, ")]


@pytest.fixture(scope="module")
def sampled(model) -> dict:
    return _json(model, *SAMPLED)


def _half_characters(model, ids) -> list[str]:
    """The texts of ids[:i] that end in the U+FFFD of a character the next tokens complete."""
    tok = read_tokenizer(model, 300)
    text = tok.decode(ids)
    parts = [tok.decode(ids[:i]) for i in range(1, len(ids))]
    return [p for p in parts if p.endswith("\ufffd") and not text.startswith(p)]


def test_a_character_split_across_tokens_is_printed_once_complete(model, sampled):
    assert _half_characters(model, sampled["token_ids"])  # the case is met
    assert _printed(model, *SAMPLED) == sampled["text"]  # before: U+FFFD where it has "É"


def test_no_part_of_a_stop_string_is_printed(model):
    whole = _json(model, *GREEDY)["text"]
    stop = whole[-3:]  # three one-character tokens: printed one by one before
    assert "\ufffd" not in stop and whole.index(stop) == len(whole) - 3
    result = _json(model, *GREEDY, "--stop", stop)
    assert (result["text"], result["finish_reason"]) == (whole[:-3], "stop")
    assert _printed(model, *GREEDY, "--stop", stop) == whole[:-3]  # before: + stop[:2]


def test_a_stop_string_is_not_matched_on_half_a_character(model, sampled):
    stop = _half_characters(model, sampled["token_ids"])[0][-2:]  # "n\ufffd" while "É" comes
    assert stop not in sampled["text"]
    result = _json(model, *SAMPLED, "--stop", stop)
    assert result["token_ids"] == sampled["token_ids"]  # before: stopped at the half character
    assert (result["text"], result["finish_reason"]) == (sampled["text"], "length")
    assert _printed(model, *SAMPLED, "--stop", stop) == sampled["text"]
