"""The fleet app: cross-run incidents per (tenant, tool), on faust-streaming."""
