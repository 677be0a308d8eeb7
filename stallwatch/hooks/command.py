"""`stallwatch hook <agent>`: forwards one hook payload to `stallwatch serve` and prints its
answer. It runs on every tool call, so it imports only a few modules of the standard library
(a plain HTTP/1.1 request over a socket: urllib and http.client cost more than the interpreter's
own start-up), and it fails open: when the server is away the call runs, and stderr says so
once per session."""

from __future__ import annotations

import json
import os
import socket
import sys
import zlib

DEFAULT_URL = "http://127.0.0.1:8737"
URL_ENV = "STALLWATCH_SERVE_URL"
TOKEN_ENV = "STALLWATCH_SERVE_TOKEN"
# Longer than a verdict through Kafka takes (5 s at most) plus Claude Code's transcript wait;
# shorter than each agent's own hook timeout as installed (10 s).
TIMEOUT_S = 8.0
AGENTS = ("claude", "codex", "gemini")


class Unreachable(Exception):
    """No answer from the server: the call runs unguarded."""


def _marker(payload: bytes) -> str:
    """A file per session: its presence means this session was told the server is away."""
    try:
        session = str(json.loads(payload).get("session_id", ""))
    except (ValueError, AttributeError):
        session = ""
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(tmp, f"stallwatch-hook-away-{zlib.crc32(session.encode()):08x}")


def _say_away_once(payload: bytes, url: str, why: str) -> None:
    try:
        os.close(os.open(_marker(payload), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return
    except OSError:
        pass  # cannot remember: say it every time rather than never
    print(f"stallwatch: no server at {url} ({why}); tool calls run unguarded: start `stallwatch serve`",
          file=sys.stderr)


def _address(url: str) -> tuple[str, int, bool]:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise Unreachable(f"{URL_ENV} must be http://host:port, not {url!r}")
    netloc = rest.split("/", 1)[0]
    host, colon, port = netloc.rpartition(":") if netloc.count(":") == 1 or netloc.endswith("]") \
        or "]:" in netloc else ("", "", "")
    if not colon:
        host, port = netloc, ("443" if scheme == "https" else "80")
    return host.strip("[]"), int(port), scheme == "https"


def forward(agent: str, payload: bytes, url: str, token: str | None, timeout_s: float) -> bytes:
    """The server's answer body; raises Unreachable when it cannot be had."""
    try:
        host, port, tls = _address(url)
        head = [f"POST /hooks/{agent} HTTP/1.1", f"Host: {host}:{port}", "Connection: close",
                "Content-Type: application/json", f"Content-Length: {len(payload)}"]
        if token:
            head.append(f"Authorization: Bearer {token}")
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            conn = sock
            if tls:
                import ssl  # only for https: it costs more than the rest of this command

                conn = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
    except (OSError, ValueError) as exc:
        raise Unreachable(str(exc) or type(exc).__name__) from None
    response = b"".join(chunks)
    status_line, _, rest = response.partition(b"\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    parts = status_line.split()
    if len(parts) < 2 or parts[1] != b"200":
        raise Unreachable(f"HTTP {parts[1].decode() if len(parts) > 1 else '?'} from the server")
    return body


def main(argv: list[str]) -> int:
    """Always exits 0: a hook that fails must never stop the agent's call."""
    if len(argv) != 1 or argv[0] not in AGENTS:
        print(f"usage: stallwatch hook {{{','.join(AGENTS)}}} (reads the hook's JSON on stdin)",
              file=sys.stderr)
        return 0
    payload = sys.stdin.buffer.read()
    url = os.environ.get(URL_ENV) or DEFAULT_URL
    try:
        answer = forward(argv[0], payload, url, os.environ.get(TOKEN_ENV) or None, TIMEOUT_S)
    except Unreachable as exc:
        _say_away_once(payload, url, str(exc))
        return 0
    if answer.strip() not in (b"{}", b""):
        sys.stdout.buffer.write(answer)
        sys.stdout.flush()
    return 0
