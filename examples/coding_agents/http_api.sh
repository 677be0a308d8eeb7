#!/usr/bin/env bash
# The client's calls over HTTP, for a runtime in any language (schemas/openapi.json).
set -euo pipefail
api=http://127.0.0.1:8737/v1
post() { curl -s -X POST "$api$1" -H 'Content-Type: application/json' -d "${2:-{\}}"; echo; }
post /runs '{"run_id": "demo-1", "mode": "researcher", "tools": [{"name": "search"}]}'
post /runs/demo-1/rounds
post /runs/demo-1/calls '{"tool": "search", "args": {"q": "kafka"}, "call_id": "c1"}'
post /runs/demo-1/results '{"call_id": "c1", "tool": "search", "result": ["doc-1"]}'
post /runs/demo-1/calls '{"tool": "search", "args": {"q": "kafka"}, "call_id": "c2"}'   # refused
post /runs/demo-1/rounds/end
post /runs/demo-1/end '{"reason": "done"}'
