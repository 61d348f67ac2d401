"""Hunt 65's serving holes checked below the servers, against independent oracles. Broken
before:

- a seed was read as 64-bit but `jax.random.PRNGKey` (x64 off) kept its low 32 bits, so 5,
  5 + 2**32, 5 + 2**40 and 5 - 2**32 drew the same tokens, as did -1 and 2**63 - 1, and 0
  and -2**63 (`seed_key` now folds the high word in; seeds in [0, 2**32) are unchanged);
- chat logprobs' `bytes` were the decoded text's, U+FFFD's for a token holding part of a
  character (here an HF byte-level BPE's, besides the byte tokenizer the servers test);
- a message's `name` never reached the chat template;
- the 429 said "12 requests are waiting (limit 8)": the count held the requests about to take
  the free slots.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_inference.engine import ByteTokenizer, SamplingParams
from wse_inference.mock import MockEngine
from wse_inference.sampling import draw, seed_key, token_key
from wse_inference.serve.admission import QueueFullError
from wse_inference.serve.chat_template import chat_prompt
from wse_inference.serve.scheduler import Scheduler
from wse_inference.serve.token_bytes import token_bytes
from wse_inference.testing import save_byte_bpe

UNIFORM = jnp.full(256, 1 / 256)


def _draws(seed: int, n: int = 24) -> list[int]:
    """The first n tokens a sequence seeded `seed` draws from a uniform 256-token row."""
    keys = jax.vmap(lambda i: token_key(seed_key(seed), i))(jnp.arange(n))
    return np.asarray(jax.vmap(draw, in_axes=(None, 0))(UNIFORM, keys)).tolist()


# --- 1: every int64 seed its own stream ------------------------------------------------------
@pytest.mark.parametrize(
    "seeds",
    [(5, 5 + 2**32, 5 + 2**40, 5 - 2**32), (-1, 2**63 - 1), (0, -(2**63)),
     (1234567, 1234567 + 7 * 2**32)],
)  # fmt: skip
def test_seeds_differing_in_their_high_bits_draw_different_tokens(seeds):
    drawn = [tuple(_draws(s)) for s in seeds]
    assert len(set(drawn)) == len(seeds), drawn  # 24 uniform draws: a clash is 256**-24


@pytest.mark.parametrize("seed", [0, 5, 2**32 - 1, 2**32, -1, -(2**63), 2**63 - 1])
def test_the_same_seed_draws_the_same_tokens(seed):
    assert _draws(seed) == _draws(seed)


@pytest.mark.parametrize("seed", [0, 1, 5, 1234567, 2**31, 2**32 - 1])
def test_seeds_below_2_to_the_32_keep_their_streams(seed):
    np.testing.assert_array_equal(seed_key(seed), jax.random.PRNGKey(seed))


# --- 3: a token's own bytes --------------------------------------------------------------------
@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    from wse_inference.model_dir import HFTokenizer

    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    save_byte_bpe(path, vocab_size=300, texts=("héllo wörld €",))
    return HFTokenizer(path)


def test_byte_level_bpe_tokens_give_the_bytes_they_stand_for(bpe):
    text = "héllo wörld € ü"
    ids = bpe.encode(text)
    split = [t for t in ids if bpe.decode([t]) == "\ufffd"]  # part of a character alone
    assert split  # the case `bytes` exists for
    got = [token_bytes(bpe, t, bpe.decode([t])) for t in ids]
    assert b"".join(got) == text.encode("utf-8")  # was U+FFFD's bytes for each split token
    assert all(len(token_bytes(bpe, t, "\ufffd")) == 1 for t in split)


def test_byte_tokens_are_their_byte_and_tokens_without_text_have_none():
    tok = ByteTokenizer()
    assert [token_bytes(tok, t, tok.decode([t])) for t in (0x41, 0x80, 0xFF)] == [
        b"A", b"\x80", b"\xff"
    ]  # fmt: skip
    assert token_bytes(tok, 300, tok.decode([300])) == b""  # outside the vocabulary: no text


# --- 2: a message's name reaches the template ---------------------------------------------------
NAMED = [{"role": "user", "content": "hi", "name": "alice"}, {"role": "user", "content": "yo"}]


def test_a_jinja_template_sees_each_messages_name():
    template = "{% for m in messages %}{{ m.name or '-' }}/{{ m.content }};{% endfor %}"
    tok = ByteTokenizer()
    assert tok.decode(chat_prompt(NAMED, tok, template)) == "alice/hi;-/yo;"


def test_apply_chat_template_gets_the_names_and_the_generation_flag():
    class Recording(ByteTokenizer):
        def apply_chat_template(self, msgs, *, tokenize, add_generation_prompt):
            self.seen = (msgs, add_generation_prompt)
            return "x"  # the rendered text (tokenize=False, review 82)

    tok = Recording()
    chat_prompt(NAMED, tok, add_generation_prompt=False)
    assert tok.seen == (
        [{"role": "user", "content": "hi", "name": "alice"}, {"role": "user", "content": "yo"}],
        False,
    )


def test_the_plain_template_leaves_names_out_as_its_docstring_says():
    tok = ByteTokenizer()
    assert tok.decode(chat_prompt(NAMED, tok)) == "user: hi\nuser: yo\nassistant:"


# --- 9: the 429's count --------------------------------------------------------------------------
def test_the_busy_message_counts_no_more_than_the_limit():
    """Not started, the scheduler admits nothing: 4 requests may wait for the 4 free slots and
    8 more in the queue; the 13th is refused, with the 8 it counted."""
    scheduler = Scheduler(MockEngine(max_slots=4), max_queued=8)
    sampling = SamplingParams(max_tokens=2)
    for _ in range(12):
        scheduler.submit(prompt_ids=[97], sampling=sampling, sink=lambda ev: None)
    with pytest.raises(QueueFullError) as info:
        scheduler.submit(prompt_ids=[97], sampling=sampling, sink=lambda ev: None)
    assert str(info.value) == (
        "The server is busy: all 4 slots are taken and 8 requests are queued for one (limit "
        "8); retry later."
    )
