"""wse_inference: pipelined batch-1 decoding, speculative decoding, and serving.

Contract: the `Engine` interface in `wse_inference.engine` (prefill / insert / generate /
release over decode slots) is what the HTTP and gRPC servers use; the pipelined wafer engine
and `MockEngine` implement it.

Decoding modules (import them directly; importing this package imports nothing heavy):
- `planner` — layers -> wafer regions sized by the SRAM ledger, one or several wafers;
- `decode_perf` — batch-1 tokens/s model, calibrated once on Llama 3.1 8B / WSE-3;
- `sampling` — temperature, top-k, top-p, keyed draws, stop strings;
- `decoding` — the plain single-device KV-cache decoder (the reference);
- `pipeline` — `PipelineEngine`: stages on PE rows, activations moved by fabric shifts;
- `speculative`, `spec_decode` — exact rejection sampling; draft + target decoding;
- `loading`, `loader` — model dirs (HF or `wse train`), tokenizers, `load_engine`;
- `studies` — experiments `hotchips24-inference`, `leviathan23-speculative`; `demo`.
"""
