"""wse_inference: pipelined batch-1 decoding, speculative decoding, and serving.

Contract: the `Engine` interface in `wse_inference.engine` (prefill / insert / generate /
release over decode slots) is what the HTTP and gRPC servers use; the pipelined wafer engine
and `MockEngine` implement it.
"""
