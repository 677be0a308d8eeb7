#!/usr/bin/env bash
# Gemini CLI guarded by stallwatch through its own hooks (pip install 'stallwatch[serve]').
# A stop ends the run (`continue: false`); hooks load only in a trusted folder.
set -euo pipefail
stallwatch serve &                          # 127.0.0.1:8737; --kafka to judge through workers
trap 'kill $!' EXIT
stallwatch hooks install gemini             # ~/.gemini/settings.json, hooksConfig.enabled set
gemini -p "Fix the failing test in this repository" --approval-mode yolo
