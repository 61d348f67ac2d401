# %% [markdown]
# # Pipelined and speculative inference, then serving
#
# A jupytext script (`# %%` cells); the site build executes it (`docs/hooks.py`) at the small
# size below (`WSE_TUTORIAL_SIZE=full` generates more tokens). A tiny random Llama-shaped model
# is saved as an HF model dir, loaded as `wse infer` loads one, laid out over wafer regions
# and decoded by the pipelined engine; the plain single-device decoder is the oracle. Then
# speculative decoding with a one-layer draft, and the OpenAI-compatible server, asked with
# the official `openai` client.

# %%
import os
import tempfile
from pathlib import Path

import jax
import wse_models
from wse_core.cost.assumptions import assumed_spec
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import SamplingParams
from wse_inference.model_dir import load_model, truncated_model
from wse_inference.pipeline.engine import PipelineEngine

FULL = os.environ.get("WSE_TUTORIAL_SIZE") == "full"
n = 48 if FULL else 12
scratch = tempfile.TemporaryDirectory()  # removed when the script or kernel ends
path = Path(scratch.name) / "tiny-model"
config = wse_models.preset_config("tiny-llama", n_layers=4)
wse_models.save_pretrained(
    wse_models.Transformer(config, params=wse_models.init_params(config, jax.random.key(0))), path
)
model = load_model(path)
prompt = model.tokenizer.encode("The wafer ")
greedy = SamplingParams(max_tokens=n, temperature=0.0)
print(f"{config.n_layers} layers, d_model {config.d_model}, vocab {config.vocab_size}")

# %% [markdown]
# The pipelined engine: the embedding/head region and two stages of layers, each on its own
# block of PEs, tokens flowing through them. Greedy decoding must give exactly the tokens of
# the plain decoder.

# %%
eng = PipelineEngine(model, spec=assumed_spec("wse3"), stages=2, max_context=len(prompt) + n + 8)
for s in (eng.plan.head, *eng.plan.stages):
    print(f"{s.name}: {s.region.rows} x {s.region.cols} PEs, {s.bytes_per_pe} B/PE")
piped = eng.generate_all([prompt], [greedy], steps_per_call=4)[0]
plain = PlainDecoder(model.config, model.params, max_context=len(prompt) + n + 8)
reference = plain.generate(prompt, greedy).tokens
print(f"pipelined: {piped}\nplain:     {list(reference)}")
assert list(piped) == list(reference)

# %% [markdown]
# The predicted time per token of this layout on a WSE-3, by mechanism.

# %%
report = eng.report(tokens=len(piped), kv_tokens=len(prompt) + n // 2)
print(f"predicted {report.predicted_s * 1e6:.1f} us/token ({report.bound}-bound)")
report

# %% [markdown]
# Speculative decoding: a draft (the target's first layer) proposes `gamma` tokens and the
# target checks them in one pass. Greedy, the accepted text is the target's own.

# %%
from wse_inference.speculative.decoder import SpeculativeDecoder  # noqa: E402

spec_dec = SpeculativeDecoder(
    model, truncated_model(model, 1), gamma=4, max_context=len(prompt) + n + 8
)
out = spec_dec.generate(prompt, greedy)
m = out.metrics["speculative"]
print(
    f"same tokens as the target: {list(out.tokens) == list(reference)}; acceptance "
    f"{m['acceptance_rate']:.2f}, {m['mean_tokens_per_pass']:.2f} tokens per target pass"
)
assert list(out.tokens) == list(reference)

# %% [markdown]
# Serving: `MockEngine` (next token = last + 1, so every answer can be checked by hand) behind
# the OpenAI-compatible HTTP server on a free port. `wse infer serve --model-dir` serves a real
# model the same way.

# %%
import openai  # noqa: E402
from wse_inference.mock import ByteTokenizer, MockEngine, expected_continuation  # noqa: E402
from wse_inference.serve.app import ServeConfig, Server  # noqa: E402

server = Server(
    MockEngine(max_slots=4, max_context=128, step_delay_s=0.001),
    ServeConfig(port=0, grpc_port=0, max_queued=16, drain_s=1),
).start()
try:
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="none", max_retries=0)
    r = client.completions.create(model="mock", prompt="abc", max_tokens=6)
finally:
    server.close()
tok = ByteTokenizer()
want = tok.decode(expected_continuation(tok.encode("abc"), 6))
print(f"completion of 'abc': {r.choices[0].text!r} (the rule says {want!r})")
assert r.choices[0].text == want
