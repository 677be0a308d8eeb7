"""A small builder of event logs for tests: one run, numbered events, steady event time."""

from __future__ import annotations

from typing import Any

import orjson

from stallwatch.contract.envelope import envelope


class RunScript:
    """Writes the events of one run as dicts, with unique event ids and increasing `ts`."""

    def __init__(
        self,
        run_id: str = "run-1",
        mode: str = "researcher",
        tools: list | None = None,
        policy: dict | None = None,
        ts: float = 1_000.0,
    ) -> None:
        self.run_id = run_id
        self.ts = ts
        self.round = 0
        self.events: list[dict[str, Any]] = []
        self._calls = 0
        extra: dict[str, Any] = {"mode": mode, "tools": tools or [{"name": "search"}]}
        if policy:
            extra["policy"] = policy
        self.add("run_started", **extra)

    def add(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = envelope(kind, self.run_id, f"{self.run_id}/{len(self.events)}", self.ts, **fields)
        self.events.append(event)
        self.ts += 0.5
        return event

    def start_round(self) -> int:
        self.round += 1
        self.add("round_started", round=self.round)
        return self.round

    def end_round(self) -> None:
        self.add("round_ended", round=self.round)

    def call(self, tool: str = "search", args: Any = None, **result: Any) -> str:
        """Propose a call; with `status` (and `result` or `fingerprint`), report its result too."""
        self._calls += 1
        call_id = f"c{self._calls}"
        self.add("call_proposed", round=self.round, call_id=call_id, tool=tool, args=args)
        if result:
            self.add("call_result", round=self.round, call_id=call_id, tool=tool, **result)
        return call_id

    def round_of(self, *calls: tuple[str, Any, Any]) -> None:
        """A whole round of (tool, args, result) calls, each reported ok."""
        self.start_round()
        for tool, args, result in calls:
            self.call(tool, args, status="ok", result=result)
        self.end_round()

    def end(self) -> None:
        self.add("run_ended", reason="done")

    def lines(self) -> list[bytes]:
        return [orjson.dumps(e) for e in self.events]
