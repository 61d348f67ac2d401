"""The inference and serving parts of `wse demo`, and the load-test client of
`wse infer bench --url`; nothing here is imported by the engines or the server."""
