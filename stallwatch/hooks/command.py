"""`stallwatch hook <agent>`: forwards one hook payload to `stallwatch serve` and prints its
answer. It runs on every tool call, so it imports only the standard library, and it fails open:
when the server is away the call runs, and stderr says so once per session."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8737"
URL_ENV = "STALLWATCH_SERVE_URL"
TOKEN_ENV = "STALLWATCH_SERVE_TOKEN"
# Longer than a verdict through Kafka takes (5 s at most) plus Claude Code's transcript wait;
# shorter than each agent's own hook timeout as installed (10 s).
TIMEOUT_S = 8.0
AGENTS = ("claude", "codex", "gemini")


def _warned_marker(payload: bytes) -> Path:
    """A file per session: its presence means this session was told the server is away."""
    try:
        session = str(json.loads(payload).get("session_id", ""))
    except (ValueError, AttributeError):
        session = ""
    digest = hashlib.sha256(session.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir(), f"stallwatch-hook-away-{digest}")


def _say_away_once(payload: bytes, url: str, why: str) -> None:
    marker = _warned_marker(payload)
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return
    except OSError:
        pass  # cannot remember: say it every time rather than never
    print(f"stallwatch: no server at {url} ({why}); tool calls run unguarded: start `stallwatch serve`",
          file=sys.stderr)


def forward(agent: str, payload: bytes, url: str, token: str | None, timeout_s: float) -> bytes | None:
    """The server's answer, or None when it cannot be had (the caller fails open)."""
    request = urllib.request.Request(f"{url.rstrip('/')}/hooks/{agent}", data=payload, method="POST",
                                     headers={"Content-Type": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        _say_away_once(payload, url, f"HTTP {exc.code}")
    except (OSError, ValueError) as exc:
        _say_away_once(payload, url, str(getattr(exc, "reason", exc)))
    return None


def main(argv: list[str]) -> int:
    """Always exits 0: a hook that fails must never stop the agent's call."""
    if len(argv) != 1 or argv[0] not in AGENTS:
        print(f"usage: stallwatch hook {{{','.join(AGENTS)}}} (reads the hook's JSON on stdin)",
              file=sys.stderr)
        return 0
    payload = sys.stdin.buffer.read()
    url = os.environ.get(URL_ENV) or DEFAULT_URL
    answer = forward(argv[0], payload, url, os.environ.get(TOKEN_ENV) or None, TIMEOUT_S)
    if answer and answer.strip() not in (b"{}", b""):
        sys.stdout.buffer.write(answer)
        sys.stdout.flush()
    return 0
