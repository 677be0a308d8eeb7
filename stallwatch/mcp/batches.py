"""JSON-RPC batches on the proxy's stdin. MCP 2025-06-18 removed batching, and the SDK's stdio
server drops a line that is not one message without answering it: a client that sent a batch
would wait for its answers for ever. The proxy answers it with Invalid Request instead."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import anyio
import mcp.types as types
import orjson
from mcp.shared.message import SessionMessage

log = logging.getLogger(__name__)

INVALID_REQUEST = -32600
BATCH_REFUSED = (
    "JSON-RPC batches are not supported (MCP 2025-06-18 removed them); send each message on a line of its own"
)


def is_batch(line: str) -> bool:
    """A JSON array on one line. A line that is not JSON at all stays the SDK's to drop: an
    answer to stray output could start an exchange of errors."""
    text = line.strip()
    if not text.startswith("["):
        return False
    try:
        return type(orjson.loads(text)) is list
    except orjson.JSONDecodeError:
        return False


def batch_refusal() -> SessionMessage:
    """JSON-RPC's answer to a request that cannot be read as one: its id is unknown, so null."""
    error = types.JSONRPCError(
        jsonrpc="2.0", id=None, error=types.ErrorData(code=INVALID_REQUEST, message=BATCH_REFUSED)
    )
    return SessionMessage(error)


class BatchesAnswered:
    """The client's lines, as the SDK's stdio server reads them, less the batches: each is
    answered on the server's own write stream (`answer_on`), so that answers never interleave
    on stdout."""

    def __init__(self, lines: AsyncIterable[str]) -> None:
        self._lines = lines
        self._write: Any = None  # the SDK's write stream, once stdio_server has made it
        self._ready = asyncio.Event()
        self._warned = False

    def answer_on(self, write: Any) -> None:
        self._write = write
        self._ready.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            if not is_batch(line):
                yield line
                continue
            if not self._warned:
                self._warned = True
                log.warning(
                    "the MCP client sent a JSON-RPC batch; it is answered with Invalid "
                    "Request (MCP 2025-06-18 has no batches)"
                )
            await self._ready.wait()
            # The server closes its write stream as the session ends: nothing left to answer.
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self._write.send(batch_refusal())
