"""Test support: NumPy oracles and toy models with known distributions.

- `np_token_probs`: a plain-NumPy statement of `sampling.token_probs` (temperature, top-k,
  top-p), written independently of it.
- `markov_speculative`: speculative decoding of a toy Markov "model" whose next-token
  distribution p[prev] is known exactly, with a draft q[prev]; the tokens it emits must be
  distributed as the Markov chain p (`markov_joint` gives the exact joint law).
- `np_logprobs`: the raw next-token log probabilities of every generated token, from ONE
  forward pass over prompt + tokens (not the decoders' incremental KV-cache path) and a NumPy
  float64 log_softmax; `np_penalize` / `np_penalized_greedy`: vLLM's penalties in NumPy and
  greedy decoding under them (`np_forward_logits`: one parallel forward, float64).
- `tiny_config` / `tiny_model_dir`: a small random `wse_models` model saved in HF format;
  `one_request`: one request run alone through an engine to its end;
  `save_byte_bpe`: a byte-level BPE tokenizer.json for such a folder; `llama2_bpe(texts)`:
  a Llama-2 style one (BPE with byte fallback, "▁" for spaces, `LLAMA2_BYTES` special,
  `llama2_decoder()` Llama-2's own decoder, which strips the first space).
- `fake_openai_server(models, stream)`: an HTTP server answering GET with `models` and every
  POST with the SSE bytes `stream` (a server `wse infer bench` must not trust); either may be
  a timed or endless sequence of pieces, every reply may have another `status`, and the
  requests' headers can be kept (`seen`).
- `let_go(pieces)`: how many generated tokens (their own bytes) a detokenizer has let go by
  vLLM's rule (text ending in U+FFFD is held; nothing flushes it) with this server's bound on
  a held run, from whole decodes (the oracle of `serve.token_bytes.Hold`).
"""

from __future__ import annotations

import codecs
import contextlib
import http.server
import itertools
import threading
import time
from collections.abc import Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from wse_inference.speculative.verify import verify

__all__ = [
    "np_token_probs",
    "np_logprobs",
    "np_forward_logits",
    "np_penalize",
    "np_penalized_greedy",
    "np_held_greedy",
    "markov_speculative",
    "markov_joint",
    "tiny_model",
    "save_byte_bpe",
    "LLAMA2_BYTES",
    "llama2_decoder",
    "llama2_bpe",
    "save_tiny_model",
    "one_request",
    "fake_openai_server",
    "let_go",
]


def np_token_probs(logits: np.ndarray, temperature: float, top_k: int, top_p: float):
    """NumPy oracle of the sampling distribution for one row of logits."""
    logits = np.asarray(logits, np.float64)
    if temperature == 0:
        out = np.zeros_like(logits)
        out[int(np.argmax(logits))] = 1.0
        return out
    z = logits / temperature
    if top_k > 0:
        kth = np.sort(z)[::-1][min(top_k, z.size) - 1]
        z = np.where(z >= kth, z, -np.inf)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    if top_p < 1:
        keep = np.zeros(probs.size, bool)
        mass = 0.0
        for i in np.argsort(-probs, kind="stable"):
            if mass >= top_p:
                break
            keep[i] = True
            mass += probs[i]
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum()
    return probs


def np_forward_logits(model, seq) -> np.ndarray:
    """[len(seq), V] float64 logits of one parallel forward over the whole token sequence
    (not the decoders' incremental KV-cache path)."""
    import wse_models

    n = len(seq)
    cache = wse_models.init_cache(model.config, 1, n)
    pos = jnp.arange(n, dtype=jnp.int32)[None]
    tokens = jnp.asarray([[int(t) for t in seq]], jnp.int32)
    logits, _ = wse_models.forward(model.config, model.params, tokens, pos, cache)
    return np.asarray(logits[0], np.float64)


def np_logprobs(model, prompt_ids, tokens) -> np.ndarray:
    """[len(tokens), V] float64: log_softmax of the logits that predicted each of `tokens`
    (generated after `prompt_ids`), from one parallel forward over the whole sequence."""
    seq = [*prompt_ids, *tokens]
    z = np_forward_logits(model, seq)[len(prompt_ids) - 1 : len(seq) - 1]
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def np_penalize(z, generated, prompt_ids, presence=0.0, frequency=0.0, repetition=1.0):
    """vLLM's penalties on logits z [V] in float64, written independently of
    `sampling.penalize`: repetition on prompt or generated tokens, then frequency x count and
    presence for the generated ones."""
    counts = np.bincount(np.asarray(generated, np.int64), minlength=z.size).astype(np.float64)
    seen = counts > 0
    seen[list(prompt_ids)] = True
    z = np.where(seen, np.where(z > 0, z / repetition, z * repetition), z)
    return z - frequency * counts - presence * (counts > 0)


def np_penalized_greedy(model, prompt_ids, n, presence=0.0, frequency=0.0, repetition=1.0):
    """n greedy tokens with vLLM's penalties, each step one parallel forward over the whole
    sequence and `np_penalize`: the decoders' oracle."""
    out: list[int] = []
    for _ in range(n):
        z = np_forward_logits(model, [*prompt_ids, *out])[-1]
        out.append(int(np.argmax(np_penalize(z, out, prompt_ids, presence, frequency, repetition))))
    return out


def np_held_greedy(model, prompt, n, held, min_tokens, stop, pen=(0.0, 0.0, 1.0)) -> list[int]:
    """Up to n greedy tokens, one parallel forward over the whole sequence a step: `held` ids
    at -inf for the first `min_tokens` steps (vLLM's min_tokens); a token of `stop` ends the
    sequence (it is kept, as the engines report it); `pen`: vLLM's presence, frequency and
    repetition penalties (`np_penalize`). The min_tokens tests' oracle."""
    out: list[int] = []
    for j in range(n):
        z = np_penalize(np_forward_logits(model, [*prompt, *out])[-1], out, prompt, *pen)
        if j < min_tokens:
            z[list(held)] = -np.inf
        out.append(int(np.argmax(z)))
        if out[-1] in stop:
            break
    return out


def markov_speculative(
    p_mat: jax.Array, q_mat: jax.Array, first: int, gamma: int, rounds: int, key: jax.Array
) -> jax.Array:
    """Tokens emitted by `rounds` speculative rounds on Markov chains (vmap over keys).

    p_mat, q_mat: [V, V] row-stochastic (row = previous token). Returns int32
    [rounds * (gamma + 1)]; the first `rounds` entries are always filled.
    """
    vocab = p_mat.shape[0]
    size = rounds * (gamma + 1) + gamma + 1

    def one_round(carry, k):
        last, buf, ptr = carry
        k_draft, k_verify = jax.random.split(k)

        def propose(prev, kk):
            d = jax.random.categorical(kk, jnp.log(q_mat[prev])).astype(jnp.int32)
            return d, (d, q_mat[prev])

        _, (drafts, q) = jax.lax.scan(propose, last, jax.random.split(k_draft, gamma))
        prevs = jnp.concatenate([last[None], drafts])
        n, t, _ = verify(drafts, q, p_mat[prevs], k_verify)
        idx = jnp.arange(gamma + 1)
        padded = jnp.concatenate([drafts, jnp.zeros((1,), jnp.int32)])
        emit = jnp.where(idx < n, padded, jnp.where(idx == n, t, vocab))
        buf = jax.lax.dynamic_update_slice(buf, emit, (ptr,))
        return (t, buf, ptr + n + 1), None

    init = (jnp.int32(first), jnp.full((size,), vocab, jnp.int32), jnp.int32(0))
    (_, buf, _), _ = jax.lax.scan(one_round, init, jax.random.split(key, rounds))
    return buf[: rounds * (gamma + 1)]


def markov_joint(p_mat: np.ndarray, first: int, length: int) -> dict[tuple[int, ...], float]:
    """Exact probability of every token sequence of `length` after `first` under p."""
    vocab = p_mat.shape[0]
    out = {}
    for seq in itertools.product(range(vocab), repeat=length):
        prob, prev = 1.0, first
        for x in seq:
            prob *= p_mat[prev, x]
            prev = x
        out[seq] = prob
    return out


def tiny_model(arch: str = "llama", *, n_layers: int = 2, seed: int = 0, **overrides):
    """A random `wse_models` model (vocab 256, byte tokenizer) as a `LoadedModel`."""
    import wse_models

    from wse_inference.model_dir import ByteTokenizer, LoadedModel

    config = wse_models.preset_config(f"tiny-{arch}", n_layers=n_layers, **overrides)
    params = wse_models.init_params(config, jax.random.PRNGKey(seed))
    return LoadedModel(f"tiny-{arch}-{n_layers}", None, config, params, ByteTokenizer())


def save_byte_bpe(path, *, vocab_size: int = 256, texts=("hello world",)) -> None:
    """A byte-level BPE tokenizer.json at `path` (HF `tokenizers`; the 256 byte symbols, then
    merges learnt from `texts` up to `vocab_size`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet)
    tok.train_from_iterator(list(texts) * 5, trainer)
    tok.save(str(path))


def save_tiny_model(path, arch: str = "llama", *, n_layers: int = 2, seed: int = 0, **overrides):
    """Write `tiny_model(...)` as an HF-format directory at `path`; returns the LoadedModel."""
    import wse_models

    model = tiny_model(arch, n_layers=n_layers, seed=seed, **overrides)
    wse_models.save_params(model.config, model.params, path)
    return model


def one_request(engine, prompt_ids, sampling) -> tuple[list[int], str]:
    """The tokens and finish reason of one request run alone in slot 0 of `engine` (its
    prefill's first token, then every generate step's) until it finishes."""
    prefix = engine.prefill(prompt_ids=list(prompt_ids), sampling=sampling)
    state = engine.insert(prefix=prefix, state=engine.init_decode_state(), slot=0)
    tokens, reason = [prefix.first_token], None
    while reason is None:
        state, outs = engine.generate(state=state)
        for o in outs:
            tokens += list(o.tokens)
            reason = o.finish_reason if o.finished else reason
    return tokens, reason


@contextlib.contextmanager
def fake_openai_server(
    models: bytes | Iterable[bytes | float],
    stream: bytes | Iterable[bytes | float],
    *,
    status: int = 200,
    seen: list[dict[str, str]] | None = None,
) -> Iterator[str]:
    """An HTTP server answering GET with `models` and POST with the SSE bytes `stream`;
    yields its base URL. Bytes are sent whole (with their length); an iterable is sent piece
    by piece, a float being a pause of that many seconds (a timed stream: the times of its
    tokens are known), the reply ending when the connection closes (an endless iterable,
    such as `itertools.repeat(block)`, never ends). Every reply has `status`; each request's
    headers are appended to `seen` (lower-case names)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, body: bytes | Iterable[bytes | float], ctype: str) -> None:
            if seen is not None:
                seen.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            self.send_header("content-type", ctype)
            if isinstance(body, bytes):
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.end_headers()
            with contextlib.suppress(OSError):  # the client hung up: what it is tested for
                for piece in body:
                    if isinstance(piece, float):
                        time.sleep(piece)
                    else:
                        self.wfile.write(piece)
                        self.wfile.flush()

        def do_GET(self) -> None:  # noqa: N802
            self._send(models, "application/json")

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self._send(stream, "text/event-stream")

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


LLAMA2_BYTES = [f"<0x{i:02X}>" for i in range(256)]  # Llama-2's byte-fallback tokens


def llama2_decoder():
    """Llama-2's own tokenizer.json decoder: "▁" as spaces, byte fallback, the first space
    stripped (`Strip(" ", 1, 0)`)."""
    from tokenizers import decoders

    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    return decoders.Sequence([*steps, decoders.Strip(" ", 1)])


def llama2_bpe(texts: Iterable[str]):
    """A Llama-2 style `tokenizers.Tokenizer` trained on `texts` (vocabulary 400): BPE with
    byte fallback, "▁" for spaces, its byte tokens special (they decode to "" alone)."""
    from tokenizers import Tokenizer, models, normalizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = llama2_decoder()
    special = ["<unk>", "<s>", "</s>", *LLAMA2_BYTES]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=special))
    return tok


def let_go(pieces: list[bytes]) -> int:
    """How many of `pieces` (generated tokens' own bytes, oldest first) a detokenizer has let
    go: by vLLM's rule (`detokenize_incrementally`, `DecodeStream.step`), a token lets the
    text go when the answer's bytes so far, decoded whole by Python's codec (U+FFFD for bytes
    that are no UTF-8 and for a character still arriving), make a text longer than the one
    let go that ends in no U+FFFD (a token with no bytes right after text let go adds
    nothing); and by this server's bound (hunt 62), of a run of more than 4 tokens held only
    the tokens of a character still arriving stay held. Whole decodes, not `Hold`'s state."""
    done = 0  # tokens through the last that let the text go
    for k in range(1, len(pieces) + 1):
        text = b"".join(pieces[:k]).decode("utf-8", "replace")
        grew = len(text) > len(b"".join(pieces[:done]).decode("utf-8", "replace"))
        if (grew and not text.endswith("\ufffd")) or (not pieces[k - 1] and done == k - 1):
            done = k
    if len(pieces) - done <= 4:
        return done
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.decode(b"".join(pieces))
    arriving, keep = len(decoder.getstate()[0]), 0
    while arriving > 0:
        keep += 1
        arriving -= len(pieces[-keep])
    return len(pieces) - keep
