#!/usr/bin/env bash
# Installs a coding agent's CLI from npm into .cache/agents/<agent>/ (once; later calls reuse it)
# and prints the path of its executable. Used by the real-agent tests (tests/serve/test_real_*.py).
set -euo pipefail
agent=${1:?usage: deploy/agents/install.sh claude|codex|gemini}
case $agent in
  claude) package=@anthropic-ai/claude-code@2.1.332 bin=claude ;;
  codex) package=@openai/codex@0.171.0 bin=codex ;;
  gemini) package=@google/gemini-cli@0.61.0 bin=gemini ;;
  *) echo "unknown agent $agent: claude, codex or gemini" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=$root/.cache/agents/$agent
exe=$prefix/node_modules/.bin/$bin
if [ ! -x "$exe" ]; then
  command -v npm >/dev/null || { echo "npm is not installed" >&2; exit 3; }
  mkdir -p "$prefix"
  npm install --silent --no-audit --no-fund --prefix "$prefix" "$package" >&2
fi
echo "$exe"
