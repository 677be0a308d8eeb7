#!/usr/bin/env bash
# Codex CLI guarded by stallwatch through its own hooks (pip install 'stallwatch[serve]').
# No hook can end a Codex run: after a stop every call is denied until the model answers.
set -euo pipefail
stallwatch serve &                          # 127.0.0.1:8737; --kafka to judge through workers
trap 'kill $!' EXIT
stallwatch hooks install codex              # $CODEX_HOME/hooks.json (~/.codex); --scope project for .codex/
# Codex runs new hooks only once trusted: accept them in the review `codex` shows at its next
# start, or (automation that vets its hooks) pass --dangerously-bypass-hook-trust as here.
codex exec --dangerously-bypass-hook-trust "Fix the failing test in this repository"
