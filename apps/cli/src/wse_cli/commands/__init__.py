"""One module per command group; each has `register(app)` that adds its commands to `app`.

Modules import their packages (and so JAX) inside the command functions, never at the top.
"""
