#!/usr/bin/env bash
# Claude Code guarded by stallwatch through its own hooks (pip install 'stallwatch[serve]').
# The server holds the engine; the hooks send every tool call to it before it runs.
set -euo pipefail
stallwatch serve &                          # 127.0.0.1:8737; --kafka to judge through workers
trap 'kill $!' EXIT
stallwatch hooks install claude --http      # ~/.claude/settings.json; --scope project for .claude/
claude -p "Fix the failing test in this repository" --allowedTools Bash Read Edit
# stallwatch hooks uninstall claude         # takes the entries out again, the rest kept
