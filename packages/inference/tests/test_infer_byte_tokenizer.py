"""The one byte tokenizer (`wse_inference.engine.ByteTokenizer`): text round-trips through
UTF-8 bytes, ids that are not bytes decode to nothing, and the mock engine and a model
directory without tokenizer.json use this same tokenizer."""

from __future__ import annotations

import random

from wse_inference import mock, model_dir
from wse_inference.engine import ByteTokenizer, Tokenizer

TOK = ByteTokenizer()


def test_round_trip_is_utf8():
    rng = random.Random(0)
    alphabet = "abcxyz \n\t" + "éß漢字😀" + "\u0000\u007f"
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        ids = TOK.encode(text)
        assert ids == list(text.encode("utf-8"))  # the oracle: Python's own UTF-8 encoder
        assert all(0 <= i < TOK.vocab_size for i in ids)
        assert TOK.decode(ids) == text


def test_ids_that_are_not_bytes_decode_to_nothing():
    hi = TOK.encode("hi")
    assert TOK.decode([hi[0], 256, 300, -1, hi[1], 128255]) == "hi"
    assert TOK.decode([256, 511]) == ""
    # 256 + ord("h") is not "h": no id wraps around onto a byte
    assert TOK.decode([256 + hi[0]]) == ""
    # a lone continuation byte is invalid UTF-8: U+FFFD, as bytes.decode(errors="replace")
    assert TOK.decode([0x80]) == "\ufffd"


def test_one_tokenizer_everywhere():
    assert mock.ByteTokenizer is model_dir.ByteTokenizer is ByteTokenizer
    assert isinstance(mock.MockEngine().tokenizer, ByteTokenizer)
    assert isinstance(TOK, Tokenizer)
    assert TOK.vocab()["<0x41>"] == ord("A") and len(TOK.vocab()) == 256
