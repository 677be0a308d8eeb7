"""The `stallwatch` command line: one module per command (entry point in `main`)."""
