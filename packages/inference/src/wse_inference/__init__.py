"""wse_inference: pipelined batch-1 decoding, speculative decoding, and serving.

Contract: the `Engine` interface in `wse_inference.engine` (prefill / insert / generate /
release over decode slots) is what the HTTP and gRPC servers use; the pipelined wafer engine,
the speculative engine and `MockEngine` implement it.

Layout by concept (import modules directly; importing a package imports nothing heavy):
- `engine` — the `Engine` protocol, `SamplingParams`, `SequenceTracker` (finish logic);
- `sampling` — temperature, top-k, top-p, penalties, keyed draws, logprobs, `SlotSampling`;
- `decoding` — the plain single-device KV-cache decoder (the reference);
- `pipeline/` — `perf` (a `wse_systems.pipeline` plan priced as a `RunReport` per token),
  `plan` (that plan on an emulation wafer), `schedule` (the device step), `engine`
  (`PipelineEngine`);
- `speculative/` — `config` (`--speculative-config`, parsed once), `verify` (exact rejection
  sampling), `decoder` (draft + target rounds), `engine` (`SpeculativeEngine`);
- `serve/` — `app` (the process shell), `routes` (the HTTP routes), `openai_request` /
  `openai_response` (the wire bodies), `prompt_ids` (a request's prompt as ids), `generation`
  (one request's choices), `grpc_server`, `scheduler`, `request`, `admission`, `metrics`,
  `text_stream`, `proto`, `testing`;
- `model_dir` — model dirs (HF or `wse train`); `hf_tokenizer` — their tokenizers, read and
  applied as transformers does; `generation_config` — generation_config.json's sampling
  defaults; `load` — `load_engine`, the engine a model dir serves;
- `mock` — a hand-checkable `Engine`; `testing` — NumPy oracles and tiny models;
- `studies` — experiments `hotchips24-inference`, `leviathan23-speculative`;
- `demo/` — the `wse demo` parts (`generation`, `serving`) and the load-test client.
"""
