"""One door for OTLP exports: a request's spans or log events in, contract events out, in order."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from stallwatch.otlp.rounds import RoundAssembler
from stallwatch.otlp.spans import decode_logs, decode_traces, logs_of, spans_of


class OtlpIngest:
    """Maps OTLP exports to the contract events of observe-only runs (`RoundAssembler`).
    `counts` holds what was mapped and, by reason, what was not."""

    def __init__(
        self,
        tenant: str | None = None,
        mode: str = "researcher",
        secret: bytes | None = None,
        quiet_s: float = 30.0,
        idle_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.counts: Counter = Counter()
        self._out: list[dict[str, Any]] = []
        self.assembler = RoundAssembler(
            self._out.append, self.counts, tenant, mode, secret, quiet_s, idle_s, clock
        )

    def traces(self, body: bytes, content_type: str) -> list[dict[str, Any]]:
        """The events an OTLP/HTTP trace export's body makes. Raises spans.BadRequest."""
        request = decode_traces(body, content_type)
        return self._events(lambda: self.assembler.add(list(spans_of(request, self.counts))))

    def trace_request(self, request: Any) -> list[dict[str, Any]]:
        """The events of an `ExportTraceServiceRequest` already decoded (the Kafka path)."""
        return self._events(lambda: self.assembler.add(list(spans_of(request, self.counts))))

    def logs(self, body: bytes, content_type: str) -> list[dict[str, Any]]:
        """The events an OTLP/HTTP log export's body makes. Raises spans.BadRequest."""
        request = decode_logs(body, content_type)
        return self._events(lambda: self.assembler.add(list(logs_of(request, self.counts))))

    def sweep(self) -> list[dict[str, Any]]:
        """The events of rounds closed by a quiet gap and runs ended by idleness."""
        return self._events(self.assembler.sweep)

    def sweep_all(self) -> list[dict[str, Any]]:
        """Every open round closed, as if each run had been quiet long enough (a shutdown, a test)."""
        return self._events(self.assembler.close_all)

    def _events(self, work: Callable[[], None]) -> list[dict[str, Any]]:
        work()
        out, self._out[:] = list(self._out), []
        return out
