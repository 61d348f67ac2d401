"""Serving an `Engine` over OpenAI-compatible HTTP and gRPC; the architecture is in `app`."""
