"""`python -m wse_cli` runs the `wse` command (used by `wse launch`)."""

from wse_cli.app import main

main()
