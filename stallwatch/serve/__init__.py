"""`stallwatch serve`: the client's calls over a local HTTP JSON API, and coding agents' hooks."""
