"""The requests of `wse infer bench`: each one's prompt and output length, drawn as vLLM's
`vllm bench serve --dataset-name` draws them (vllm/benchmarks/datasets.py), so that a run
loads the server with realistic, varied prompt and output lengths; and when each is sent.

Contract. A dataset is a spec (`RandomSpec`, `ShareGPTSpec`; None in `LoadTestConfig` is the
fixed `--prompt`) resolved once against the server into a `Sample`, whose `request(i)` is the
i-th request's `BenchRequest` (prompt, prompt tokens, max_tokens) and whose `params` the
summary records (the name, its settings, the seed). Bad settings and files are
`DatasetError`, one line naming what is wrong and what is expected.

`bench_tokens.draw(cfg, client, model)` is the one entry the load test calls; the parts:


- `fixed(prompt, max_tokens)`: every request the same text (the bench's default; vLLM has no
  such dataset). The client has no tokenizer, so its prompt_len is None and the load test
  takes the server's usage.prompt_tokens instead.
- `random_sample(spec, num, seed, vocab_size)`: vLLM's RandomDataset. From
  `np.random.default_rng(seed)`, in vLLM's order: input lengths uniform over the integers of
  [floor(L(1 - r)), ceil(L(1 + r))], output lengths over [max(1, floor(O(1 - r))),
  ceil(O(1 + r))], an offset in [0, V) each, then one prefix of `prefix_len` ids shared by
  every request. Request i's ids are the prefix, then (offset_i + i + k) % V for k below its
  length; they are sent as a token-id prompt, so the server runs on exactly prefix + length
  tokens. vLLM decodes them to text and re-encodes it, having first taken the tokenizer's
  special tokens (its BOS) off L, which the server adds back: the same count on the server.
  vLLM draws from the vocabulary without the special ids; without a tokenizer this client
  cannot know them, so V is the whole vocabulary (`--random-vocab-size`, else the
  `vocab_size` the server lists for the model in GET /v1/models: `bench_tokens`).
  Requests are made when sent, not kept: 24 bytes a request, whatever their lengths.
- `random_text_sample(sample, decode, encode, ...)`: the same requests as text, for a chat
  (`--backend openai-chat`: its prompt is one user message), as vLLM's RandomDataset makes
  every prompt (`gen_prompt_decode_to_target_len`): the ids decoded, the text encoded again
  without special tokens, and while the count differs from the target (prefix + length),
  cut to it or filled with random ids, at most `MAX_RETRY` times; the prompt is the last text
  decoded, its tokens that text's count (what the summary's input tokens add up; the
  difference from the targets is `token_mismatch`, vLLM's warning). This client has no
  tokenizer: `decode` and `encode` are the server's /detokenize and /tokenize (vLLM's
  endpoints, `bench_tokens`), `width` requests at a time, each filled from its own generator
  seeded (seed, i) so the order they finish in changes nothing (vLLM fills from the
  dataset's one generator, request after request). The texts are held for the run, at most
  `MAX_TEXT_TOKENS` target tokens in all.
- `sharegpt(path)` reads vLLM's ShareGPT JSON (`sharegpt_file`: a local file, bounded, the
  first two turns of each conversation of two or more); `sharegpt_sample` shuffles them with
  `random.Random(seed)` (vLLM's `random.seed(seed); random.shuffle`: the same order), then
  walks them in order, counting tokens with the server's /tokenize (vLLM's endpoint; vLLM
  counts with `tokenizer(text)`, special tokens included, as /tokenize does by default), and
  keeps an entry unless its prompt is < 4 or > 1024 tokens, its output < 4 or prompt +
  output > 2048 (vLLM's `is_valid_sequence`); the output is the reply's tokens, or
  `output_len` (`--sharegpt-output-len`: no minimum then; at most 2,044, else no prompt of
  4 fits: refused before the file is read). A text /tokenize refuses (400, 413, or a request
  closed unanswered) is dropped too, and so is one of more than `MAX_TEXT_CHARS` characters,
  unsent (no vocabulary's tokens average 512 characters: it is past the filter). A refusal
  about the request, not the text (a model not served), stops the draw at once. The server's
  answers are read by `bench_tokens`. Fewer entries kept than asked: the rest drawn again
  from those kept, seeded (vLLM's oversampling). The order and the kept entries are arrays
  of integers, 4 bytes a conversation and 24 a kept one (hunt 71: lists of ints and tuples,
  ~40 and ~100 bytes).

`arrival_times(rate, burstiness, seed, n)` is when each of n requests is sent (vLLM's
`--request-rate`, `--burstiness`, `--seed`; `get_request` in vllm/benchmarks/serve.py): a rate
None sends every request at once (vLLM's inf); a rate R draws n gaps from a gamma
distribution of mean 1 / R and shape `burstiness` (1: a Poisson process; below 1 burstier),
the first request's included, from NumPy's legacy generator seeded as vLLM's
`np.random.seed(seed)` seeds it, adds them up and rescales the sums so that the last request
is sent at exactly n / R s (vLLM's `normalize_factor`, "to close the gap for stabilizing the
throughput data from different random seeds"; hunt 82: unscaled, -n 16 at 1 req/s took 6.9 s
at one seed and 19.4 s at another). 8 bytes a request, held for the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from array import array
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from wse_inference.demo.sharegpt_file import ShareGPTFileError, read_sharegpt

__all__ = [
    "MAX_LEN",
    "MAX_SHAREGPT_OUTPUT_LEN",
    "MAX_RETRY",
    "MAX_TEXT_CHARS",
    "MAX_TEXT_TOKENS",
    "BenchRequest",
    "DatasetError",
    "MAX_TOKENS_IN_FLIGHT",
    "RandomSpec",
    "Sample",
    "ShareGPTSpec",
    "arrival_times",
    "fixed",
    "random_sample",
    "random_text_sample",
    "sharegpt",
    "sharegpt_sample",
]

MAX_LEN = 1 << 20  # tokens of one prompt or output: a 1M-token context, ~7 MB of JSON ids
# Random prompt tokens held by the requests in flight: a token-id prompt is a Python list while
# it is sent, ~43 bytes a token (an int, its pointer, its JSON): 2^27 tokens are ~5.8 GB
MAX_TOKENS_IN_FLIGHT = 1 << 27
# vLLM's filter (is_valid_sequence): at least 4 tokens each, a prompt of at most 1,024
MIN_LEN, MAX_PROMPT_LEN, MAX_TOTAL_LEN = 4, 1024, 2048
MAX_SHAREGPT_OUTPUT_LEN = MAX_TOTAL_LEN - MIN_LEN  # a fixed output leaving room for a prompt
# A text longer than this is past the filter whatever the vocabulary (a reply of 2,044 tokens
# would need 513 characters a token): dropped unsent, as it would be by its token count
MAX_TEXT_CHARS = 1 << 20
# A /tokenize reply over this is over 2,048 ids (at most ~9 bytes each): past the filter
MAX_TOKENIZE_BYTES = 1 << 20
# vLLM's gen_prompt_decode_to_target_len: rounds of decode, encode and cut or fill
MAX_RETRY = 10
# Target tokens of the random dataset's prompts held as text for a chat, all requests
# together: 2^24 tokens, ~64 MB of str at GPT-2's ~4 characters a token (OpenAI's rule of
# thumb for English; a byte-level vocabulary holds less)
MAX_TEXT_TOKENS = 1 << 24


class DatasetError(ValueError):
    """A dataset that cannot be drawn: bad settings or file (`fault` False: the user's to
    fix), or a server that failed while it was drawn (`fault` True)."""

    def __init__(self, message: str, *, fault: bool = False) -> None:
        super().__init__(message)
        self.fault = fault


class BenchRequest(NamedTuple):
    prompt: str | list[int]  # a text, or token ids (sent as they are)
    prompt_len: int | None  # its tokens; None: not counted (the fixed prompt)
    max_tokens: int


class Sample(Protocol):
    params: dict[str, Any]

    def request(self, i: int) -> BenchRequest: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class RandomSpec:
    """vLLM's --random-input-len, --random-output-len, --random-range-ratio,
    --random-prefix-len (its defaults); `vocab_size` None: the server's."""

    input_len: int = 1024
    output_len: int = 128
    range_ratio: float = 0.0
    prefix_len: int = 0
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.range_ratio < 1.0:
            raise DatasetError(f"--random-range-ratio must be in [0, 1), got {self.range_ratio}")
        lens = {"input-len": self.input_len, "output-len": self.output_len}
        for name, v in (*lens.items(), ("prefix-len", self.prefix_len)):
            least = 0 if name == "prefix-len" else 1
            if not least <= v <= MAX_LEN:
                raise DatasetError(f"--random-{name} must be in [{least}, {MAX_LEN}], got {v}")
        if self.vocab_size is not None and not 1 <= self.vocab_size < 2**31:
            raise DatasetError(
                f"--random-vocab-size must be in [1, {2**31 - 1}], got {self.vocab_size}"
            )
        if self.prefix_len + self.input_bounds[0] < 1:  # vLLM's check: no empty prompt
            raise DatasetError(
                f"--random-input-len {self.input_len} with --random-range-ratio "
                f"{self.range_ratio} may draw an empty prompt (floor({self.input_len} x (1 - "
                f"{self.range_ratio})) = 0 tokens); raise --random-input-len or "
                "--random-prefix-len, or lower --random-range-ratio"
            )

    @property
    def input_bounds(self) -> tuple[int, int]:
        """The input lengths drawn, both ends in (vLLM's floor and ceil), without the prefix."""
        r = self.range_ratio
        return math.floor(self.input_len * (1 - r)), math.ceil(self.input_len * (1 + r))

    def check_in_flight(self, concurrency: int) -> None:
        """DatasetError where `concurrency` requests of the longest prompt would hold more
        than `MAX_TOKENS_IN_FLIGHT` tokens at once."""
        longest = self.prefix_len + self.input_bounds[1]
        if concurrency * longest > MAX_TOKENS_IN_FLIGHT:
            raise DatasetError(
                f"--concurrency {concurrency} requests of up to {longest:,} prompt tokens hold "
                f"{concurrency * longest:,} token ids at once, past the {MAX_TOKENS_IN_FLIGHT:,} "
                "this client holds (~43 bytes each); lower --concurrency or --random-input-len"
            )

    @property
    def output_bounds(self) -> tuple[int, int]:
        r = self.range_ratio
        lo, hi = math.floor(self.output_len * (1 - r)), math.ceil(self.output_len * (1 + r))
        return max(lo, 1), max(hi, 1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShareGPTSpec:
    """A ShareGPT file read (`sharegpt`): its (prompt, reply) texts, in the file's order."""

    path: str
    conversations: Sequence[tuple[str, str]] = dataclasses.field(repr=False)
    output_len: int | None = None  # --sharegpt-output-len; None: each reply's tokens


class _Fixed:
    def __init__(self, prompt: str, max_tokens: int) -> None:
        self.req = BenchRequest(prompt, None, max_tokens)
        self.params = {"name": "prompt", "max_tokens": max_tokens}

    def request(self, i: int) -> BenchRequest:
        return self.req


def fixed(prompt: str, max_tokens: int) -> Sample:
    """Every request `prompt`, for `max_tokens` (the bench's default dataset)."""
    return _Fixed(prompt, max_tokens)


class _Random:
    def __init__(self, spec: RandomSpec, num: int, seed: int, vocab_size: int) -> None:
        rng = np.random.default_rng(seed)  # vLLM's draws, in vLLM's order
        (ilo, ihi), (olo, ohi) = spec.input_bounds, spec.output_bounds
        self.input_lens = rng.integers(ilo, ihi + 1, size=num)
        self.output_lens = rng.integers(olo, ohi + 1, size=num)
        self.offsets = rng.integers(0, vocab_size, size=num)
        self.prefix = rng.integers(0, vocab_size, size=spec.prefix_len).tolist()
        self.vocab_size = vocab_size
        self.params = {
            "name": "random",
            "random_input_len": spec.input_len,
            "random_output_len": spec.output_len,
            "random_range_ratio": spec.range_ratio,
            "random_prefix_len": spec.prefix_len,
            "random_vocab_size": vocab_size,
            "input_lens": [spec.prefix_len + ilo, spec.prefix_len + ihi],  # with the prefix
            "output_lens": [olo, ohi],
            "seed": seed,
        }

    def request(self, i: int) -> BenchRequest:
        n = int(self.input_lens[i])
        inner = (int(self.offsets[i]) + i + np.arange(n)) % self.vocab_size
        ids = self.prefix + inner.tolist()
        return BenchRequest(ids, len(ids), int(self.output_lens[i]))


def random_sample(spec: RandomSpec, num: int, seed: int, vocab_size: int) -> Sample:
    """`num` requests of vLLM's random dataset over ids [0, `vocab_size`) (module docstring)."""
    return _Random(spec, num, seed, vocab_size)


Decode = Callable[[list[int]], Awaitable[str]]
Encode = Callable[[str], Awaitable[list[int]]]


class _RandomText:
    def __init__(self, ids: _Random, texts: list[str], lens: array, mismatch: int) -> None:
        self.output_lens, self.texts, self.lens = ids.output_lens, texts, lens
        self.params = {**ids.params, "token_mismatch": mismatch}

    def request(self, i: int) -> BenchRequest:
        return BenchRequest(self.texts[i], self.lens[i], int(self.output_lens[i]))


async def fit_text(ids: list[int], rng: np.random.Generator, vocab_size: int, decode: Decode,
                   encode: Encode) -> tuple[str, list[int]]:  # fmt: skip
    """vLLM's `gen_prompt_decode_to_target_len` of `ids` (the target is their count): the
    last text decoded and its ids encoded again."""
    target, seq = len(ids), list(ids)
    for tries_left in range(MAX_RETRY, -1, -1):
        text = await decode(seq)
        seq = await encode(text)
        if len(seq) == target or tries_left == 0:
            return text, seq
        fill = rng.integers(0, vocab_size, size=max(0, target - len(seq))).tolist()
        seq = seq[:target] + fill
    raise AssertionError("unreachable: the last try returns")


async def random_text_sample(sample: Sample, decode: Decode, encode: Encode, *, num: int,
                             width: int = 8) -> Sample:  # fmt: skip
    """`sample` (`random_sample`'s) with each prompt made text (module docstring); `num`
    requests, `width` at a time."""
    assert isinstance(sample, _Random)
    held = num * int(sample.params["input_lens"][1])
    if held > MAX_TEXT_TOKENS:
        raise DatasetError(
            f"a chat's random prompts are text held for the run: {num:,} requests of up to "
            f"{sample.params['input_lens'][1]:,} tokens are {held:,} tokens, past the "
            f"{MAX_TEXT_TOKENS:,} this client holds; lower -n or --random-input-len"
        )
    seed, vocab = sample.params["seed"], sample.vocab_size
    texts, lens, mismatch = [""] * num, array("q", bytes(8 * num)), 0

    async def one(i: int) -> None:
        nonlocal mismatch
        ids = sample.request(i).prompt
        assert isinstance(ids, list)
        rng = np.random.default_rng([seed, i])  # its own: the finishing order changes nothing
        texts[i], seq = await fit_text(ids, rng, vocab, decode, encode)
        lens[i], mismatch = len(seq), mismatch + len(seq) - len(ids)

    for start in range(0, num, width):
        await asyncio.gather(*map(one, range(start, min(num, start + width))))
    return _RandomText(sample, texts, lens, mismatch)


# -- ShareGPT ----------------------------------------------------------------------------------
def sharegpt(path: str | Path, output_len: int | None = None) -> ShareGPTSpec:
    """The ShareGPT file at `path` (`sharegpt_file.read_sharegpt`: missing, not a regular
    file, too large, not UTF-8 or not ShareGPT's is `DatasetError`, as is an `output_len`
    that no conversation can pass the filter with, before the file is read)."""
    if output_len is not None and not 1 <= output_len <= MAX_SHAREGPT_OUTPUT_LEN:
        raise DatasetError(
            f"--sharegpt-output-len {output_len} leaves no room for a prompt of at least "
            f"{MIN_LEN} tokens within vLLM's {MAX_TOTAL_LEN:,} in all; give 1 to "
            f"{MAX_SHAREGPT_OUTPUT_LEN}"
        )
    try:
        kept = read_sharegpt(path)
    except ShareGPTFileError as e:
        raise DatasetError(str(e)) from None
    return ShareGPTSpec(path=str(path), conversations=kept, output_len=output_len)


def _valid(prompt_len: int, output_len: int, fixed_output: bool) -> bool:
    """vLLM's `is_valid_sequence`; a fixed output length has no minimum."""
    short = prompt_len < MIN_LEN or (not fixed_output and output_len < MIN_LEN)
    return not short and prompt_len <= MAX_PROMPT_LEN and prompt_len + output_len <= MAX_TOTAL_LEN


class _Listed:
    def __init__(self, spec: ShareGPTSpec, kept: array, num: int, seed: int,
                 tokenized: int) -> None:  # fmt: skip
        self.texts, self.kept, n_kept = spec.conversations, kept, len(kept) // 3
        rng = random.Random(seed)  # vLLM's oversampling: random.seed(seed); random.choice
        self.more = array("q", (rng.randrange(n_kept) for _ in range(num - n_kept)))
        self.params = {
            "name": "sharegpt",
            "dataset_path": spec.path,
            "sharegpt_output_len": spec.output_len,
            "conversations": len(spec.conversations),  # of two turns or more
            "tokenized": tokenized,
            "kept": n_kept,
            "oversampled": len(self.more),
            "seed": seed,
        }

    def request(self, i: int) -> BenchRequest:
        n_kept = len(self.kept) // 3
        j = i if i < n_kept else self.more[i - n_kept]
        k, prompt_len, output_len = self.kept[3 * j : 3 * j + 3]
        return BenchRequest(self.texts[k][0], prompt_len, output_len)


Count = Callable[[str], Awaitable[int | None]]


async def sharegpt_sample(
    spec: ShareGPTSpec, count: Count, *, num: int, seed: int, width: int = 8
) -> Sample:
    """`num` requests of `spec`'s conversations (module docstring); `count(text)` is a
    text's tokens (None: dropped uncounted), `width` texts counted at a time."""
    order = array("I", range(len(spec.conversations)))  # a list took ~40 bytes an entry
    random.Random(seed).shuffle(order)  # the same swaps as on a list: vLLM's order
    fixed_output = spec.output_len is not None
    kept = array("q")  # (conversation, prompt tokens, output tokens) of each kept, in a row
    tokenized = refused = 0

    async def lengths(k: int) -> tuple[int | None, int | None]:
        prompt, reply = spec.conversations[k]
        p = await count(prompt)
        if p is None or not MIN_LEN <= p <= MAX_PROMPT_LEN:  # dropped: its reply uncounted
            return p, 0
        return p, spec.output_len if fixed_output else await count(reply)

    for start in range(0, len(order), width):
        window = order[start : start + width]
        for k, (p, o) in zip(window, await asyncio.gather(*map(lengths, window)), strict=True):
            if len(kept) == 3 * num:
                break
            tokenized += 1
            refused += p is None or o is None
            if p is not None and o is not None and _valid(p, o, fixed_output):
                kept.extend((k, p, o))
        if len(kept) == 3 * num:
            break
    if not kept:
        raise DatasetError(
            f"no conversation of --dataset-path {spec.path!r} passes vLLM's filter (a prompt of "
            f"{MIN_LEN} to {MAX_PROMPT_LEN} tokens, an output of at least {MIN_LEN}, at most "
            f"{MAX_TOTAL_LEN} in all; {tokenized:,} counted with the server's /tokenize"
            f"{_uncounted(refused)})"
        )
    return _Listed(spec, kept, num, seed, tokenized)


def _uncounted(refused: int) -> str:
    """How many texts were dropped uncounted (the line ends in a count that was no count)."""
    return (f", {refused:,} of them dropped uncounted: refused by it, or over "
            f"{MAX_TEXT_CHARS:,} characters" if refused else "")  # fmt: skip


def _gamma_source(seed: int) -> np.random.RandomState:
    """NumPy's legacy generator as vLLM's bench seeds it (`np.random.seed(seed)`, its one
    --seed). NumPy takes a seed below 2**32 only (vLLM refuses a larger one): above it, the
    same generator is seeded from the seed's two 32-bit words."""
    if seed < 2**32:
        return np.random.RandomState(seed)
    return np.random.RandomState([seed & 0xFFFFFFFF, seed >> 32])


def arrival_times(rate: float | None, burstiness: float, seed: int, n: int) -> np.ndarray:
    """Seconds from the start at which each of `n` requests is sent, float64 (module
    docstring): all 0 without a rate, else n cumulative gamma gaps of mean 1 / rate and shape
    `burstiness`, rescaled to end at n / rate (unless every gap underflowed to 0, as vLLM's)."""
    if rate is None:
        return np.zeros(n)
    times = np.cumsum(_gamma_source(seed).gamma(burstiness, 1.0 / (rate * burstiness), n))
    if times[-1] != 0:
        times *= (n / rate) / times[-1]
    return times
