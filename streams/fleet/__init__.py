"""The fleet app (issue 13): cross-run incidents per (tenant, tool), on faust-streaming."""
