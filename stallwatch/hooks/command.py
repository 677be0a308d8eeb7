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

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8737
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
URL_ENV = "STALLWATCH_SERVE_URL"
# ServeSettings.token's variable, spelled out: the settings module imports pydantic, which
# costs this command more than the rest of it (a test holds the two together).
TOKEN_ENV = "STALLWATCH_SERVE_TOKEN"
# Longer than a verdict through Kafka takes (5 s at most) plus Claude Code's transcript wait;
# shorter than each agent's own hook timeout as installed (10 s).
TIMEOUT_S = 8.0
AGENTS = ("claude", "codex", "gemini")


class Unreachable(Exception):
    """No answer from the server: the call runs unguarded."""


class Refused(Unreachable):
    """The server answered, but not with a verdict (a wrong token): the call runs unguarded."""


def _marker(payload: bytes) -> str:
    """A file per session: its presence means this session was told the server is away."""
    try:
        session = str(json.loads(payload).get("session_id", ""))
    except Exception:  # any payload at all (too deep for json raises RecursionError): no session
        session = ""
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(tmp, f"stallwatch-hook-away-{zlib.crc32(session.encode()):08x}")


def _say_once(payload: bytes, line: str) -> None:
    try:
        os.close(os.open(_marker(payload), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return
    except OSError:
        pass  # cannot remember: say it every time rather than never
    print(line, file=sys.stderr)


def _why_unguarded(url: str, exc: Exception) -> str:
    """One line naming what to change."""
    if isinstance(exc, Refused):
        return f"stallwatch: the server at {url} refused the hook ({exc}); tool calls run unguarded"
    if isinstance(exc, Unreachable):
        return f"stallwatch: no server at {url} ({exc}); tool calls run unguarded: start `stallwatch serve`"
    return f"stallwatch: the hook failed ({type(exc).__name__}); tool calls run unguarded"


def _address(url: str) -> tuple[str, int, bool]:
    if url == DEFAULT_URL:  # urllib.parse (and re) would cost more than the rest of the command
        return DEFAULT_HOST, DEFAULT_PORT, False
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # a port out of range or not a number, an unclosed [
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise Unreachable(f"{URL_ENV} must be http://host:port, not {url!r}")
    tls = parts.scheme == "https"
    return parts.hostname, port if port is not None else (443 if tls else 80), tls


def _host_header(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def forward(agent: str, payload: bytes, url: str, token: str | None, timeout_s: float) -> bytes:
    """The server's answer body; raises Unreachable when it cannot be had."""
    try:
        host, port, tls = _address(url)
        head = [
            f"POST /hooks/{agent} HTTP/1.1",
            f"Host: {_host_header(host, port)}",
            "Connection: close",
            "Content-Type: application/json",
            f"Content-Length: {len(payload)}",
        ]
        if token is None and host in ("127.0.0.1", "localhost", "::1"):
            from stallwatch.contract import serve_token  # only without a token set: its imports cost

            token = serve_token.read(port)  # the token a local server provisioned for this user
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
    status = parts[1].decode(errors="replace") if len(parts) > 1 else "?"
    if status == "401":
        raise Refused(f"HTTP 401: set {TOKEN_ENV} to the token the server was started with")
    if status != "200":
        raise Unreachable(f"HTTP {status} from the server")
    return body


def main(argv: list[str]) -> int:
    """Always exits 0: a hook that fails must never stop the agent's call."""
    if len(argv) != 1 or argv[0] not in AGENTS:
        print(
            f"usage: stallwatch hook {{{','.join(AGENTS)}}} (reads the hook's JSON on stdin)", file=sys.stderr
        )
        return 0
    payload, url = b"", os.environ.get(URL_ENV) or DEFAULT_URL
    try:
        payload = sys.stdin.buffer.read()
        answer = forward(argv[0], payload, url, os.environ.get(TOKEN_ENV) or None, TIMEOUT_S)
    except Exception as exc:  # whatever it is, the call runs; stdout stays empty
        _tell(payload, url, exc)
        return 0
    if answer.strip() not in (b"{}", b""):
        try:
            sys.stdout.buffer.write(answer)
            sys.stdout.flush()
        except Exception:  # the agent stopped listening: nothing to tell it
            return 0
    return 0


def _tell(payload: bytes, url: str, exc: Exception) -> None:
    """Say why the calls run unguarded; never raises (stderr may be closed too)."""
    try:
        _say_once(payload, _why_unguarded(url, exc))
    except Exception:
        return
