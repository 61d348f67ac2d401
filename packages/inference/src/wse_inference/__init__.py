"""wse_inference: pipelined batch-1 decoding, speculative decoding, and serving.

Contract: the `Engine` interface in `wse_inference.engine` (prefill / insert / generate /
release over decode slots) is what the HTTP and gRPC servers use; the pipelined wafer engine
and `MockEngine` implement it.

Decoding modules (import them directly; importing this package imports nothing heavy):
- `decode_perf` — a `wse_core.pipeline_plan` plan (the one `PipelineEngine` lays out)
  priced by `wse_core.decoder_cost` as a `RunReport` per token (the one calibration);
- `sampling` — temperature, top-k, top-p, keyed draws, stop strings;
- `decoding` — the plain single-device KV-cache decoder (the reference);
- `pipeline` — `PipelineEngine`: a plan's stages on PE rows, activations moved by fabric
  shifts; `engine.report()` is its predicted wafer time;
- `speculative`, `spec_decode` — exact rejection sampling; draft + target decoding;
- `loading`, `loader` — model dirs (HF or `wse train`), tokenizers, `load_engine`;
- `studies` — experiments `hotchips24-inference`, `leviathan23-speculative`; `demo`.
"""
