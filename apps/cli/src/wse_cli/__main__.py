"""`python -m wse_cli` runs the `wse` command (used by `wse launch`)."""

from wse_cli.entry import module_main

module_main()
