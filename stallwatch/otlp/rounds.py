"""Spans in any order made into a run's rounds, and the rounds into contract events.

A round is one model call and the tool calls that started after it and before the next model
call. Spans arrive late and out of order (an exporter sends a batch every few seconds; a
collector may reorder), so a round is closed only when a model call that started after it has
arrived (the next round's), when the run's root span has ended, or when nothing of the run has
arrived for `quiet_s`. Its decisions therefore come one model call after the round itself, plus
the exporters' delay (docs/otlp.md). A span that belongs to a round closed already is counted
as `late` and dropped: never moved into a round it was not in.

Arguments and results are digested here, as a runtime's client digests them (the events carry
fingerprints and argument digests, never the content); the runs are always observe-only.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stallwatch.contract.digests import digest
from stallwatch.contract.envelope import envelope
from stallwatch.contract.limits import bounded_id
from stallwatch.contract.parse import InvalidEvent, validate_event
from stallwatch.engine.canonical import call_signature, declared_view, fingerprint
from stallwatch.engine.masks import effective_patterns
from stallwatch.otlp.spans import Observed

MAX_RUNS = 10_000  # runs assembled at once; a span of a run past it is counted, not judged
MAX_PENDING = 2_048  # spans of one run waiting for their round to close; past it the oldest close
MAX_SEEN = 4_096  # span ids remembered per run: an exporter's retry is recognised
MAX_ENDED = 10_000  # runs ended, remembered so that a late span of one is counted as late

Sink = Callable[[dict[str, Any]], None]


@dataclass
class _Run:
    run_id: str
    by_trace: bool
    received: float  # monotonic time of the last span received
    rounds: int = 0  # rounds emitted
    closed_until: int = 0  # start (ns) of the first model call not yet emitted: before it, late
    pending: list[Observed] = field(default_factory=list)
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)


class RoundAssembler:
    """Turns the spans of many runs into contract events, handed to `sink` in each run's order."""

    def __init__(
        self,
        sink: Sink,
        counts: Counter | None = None,
        tenant: str | None = None,
        mode: str = "researcher",
        secret: bytes | None = None,
        quiet_s: float = 30.0,
        idle_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.counts = counts if counts is not None else Counter()
        self.tenant = tenant
        self.mode = mode
        self.secret = secret
        self.quiet_s = quiet_s
        self.idle_s = idle_s
        self.clock = clock
        self.runs: dict[str, _Run] = {}
        self.ended: OrderedDict[str, None] = OrderedDict()
        self._patterns = effective_patterns(mode, None)

    # -- spans in -------------------------------------------------------------------------

    def add(self, items: list[Observed]) -> None:
        """One request's spans: each placed in its run; rounds closed where they can be."""
        touched: dict[str, _Run] = {}
        for item in items:
            run = self._run(item)
            if run is None:
                continue
            if item.ident in run.seen:
                self.counts["resent"] += 1  # an exporter's retry of a span applied already
                continue
            run.seen[item.ident] = None
            if len(run.seen) > MAX_SEEN:
                run.seen.popitem(last=False)
            if item.at < run.closed_until and item.kind != "root":
                self.counts["late"] += 1
                continue
            run.pending.append(item)
            touched[run.run_id] = run
        for run in touched.values():
            ended = any(i.kind == "root" for i in run.pending)
            self._close(run, everything=ended or len(run.pending) > MAX_PENDING)
            if ended and run.by_trace:
                self._end(run, "root span ended")

    def sweep(self) -> None:
        """Close the rounds of runs quiet for `quiet_s`; end runs idle for `idle_s`."""
        now = self.clock()
        for run in list(self.runs.values()):
            if run.pending and now - run.received >= self.quiet_s:
                self._close(run, everything=True)
            if now - run.received >= self.idle_s:
                self._end(run, "idle")

    def close_all(self) -> None:
        """Close every open round now."""
        for run in self.runs.values():
            if run.pending:
                self._close(run, everything=True)

    def _run(self, item: Observed) -> _Run | None:
        run_id = bounded_id(item.run, self.secret)
        run = self.runs.get(run_id)
        if run is None:
            if run_id in self.ended:
                self.counts["late"] += 1
                return None
            if len(self.runs) >= MAX_RUNS:
                self.counts["over_run_limit"] += 1
                return None
            run = self.runs[run_id] = _Run(run_id, item.by_trace, self.clock())
            started: dict[str, Any] = {"mode": self.mode, "tools": [], "policy": {"observe_only": True}}
            if self.tenant is not None:
                started["tenant"] = self.tenant
            self._emit(run, "run_started", "start", item.at, **started)
        run.received = self.clock()
        return run

    # -- rounds out -----------------------------------------------------------------------

    def _close(self, run: _Run, everything: bool) -> None:
        """Emit the rounds that can no longer change: those before the latest model call, or
        (`everything`) all of them."""
        run.pending.sort(key=lambda i: (i.at, i.kind != "model"))
        models = [n for n, i in enumerate(run.pending) if i.kind == "model"]
        if everything:
            cut = len(run.pending)
        elif len(models) >= 2 or (models and models[0] > 0 and run.rounds > 0):
            cut = models[-1]  # the latest model call's round stays open
        else:
            return
        closing, run.pending = run.pending[:cut], run.pending[cut:]
        if run.pending:
            run.closed_until = run.pending[0].at
        elif closing:
            run.closed_until = max(i.at for i in closing) + 1
        self._emit_rounds(run, closing)

    def _emit_rounds(self, run: _Run, items: list[Observed]) -> None:
        """Rounds from items in start order: each model call opens one; tool calls before any
        model call of this batch go into a round of their own (one per call, when no model
        call is seen at all: each call then needed the model between)."""
        current: list[Observed] = []
        opened: Observed | None = None
        for item in items:
            if item.kind == "model":
                if opened is not None or current:
                    self._round(run, opened, current)
                opened, current = item, []
            elif item.kind == "tool":
                if opened is None and current:
                    self._round(run, None, current)
                    current = []
                current.append(item)
        if opened is not None or current:
            self._round(run, opened, current)

    def _round(self, run: _Run, model: Observed | None, tools: list[Observed]) -> None:
        run.rounds += 1
        number = run.rounds
        start = model.at if model is not None else tools[0].at
        opener = model.ident if model is not None else tools[0].ident
        self._emit(run, "round_started", f"{opener}/round", start, round=number)
        end = model.until if model is not None else start
        for tool in tools:
            self._call(run, number, tool)
            end = max(end, tool.until)
        self._emit(run, "round_ended", f"{opener}/round-end", end, round=number)

    def _call(self, run: _Run, number: int, item: Observed) -> None:
        tool = bounded_id(item.tool, self.secret)
        call_id = bounded_id(item.call_id, self.secret)
        proposed: dict[str, Any] = {"round": number, "call_id": call_id, "tool": tool}
        if not item.has_args:
            # No arguments to compare: a call of its own, never a repeat of another.
            proposed["args_digest"] = digest(f"no-arguments:{item.ident}".encode(), self.secret).hex()
        elif item.oversized and isinstance(item.args, str):
            proposed["args_digest"] = digest(item.args.encode("utf-8", "surrogatepass"), self.secret).hex()
        else:
            signature = call_signature(item.tool, item.args, self.secret)
            proposed["args_digest"] = (
                signature.hex()
                if signature is not None
                else digest(f"unhashable:{item.ident}".encode(), self.secret).hex()
            )
        self._emit(run, "call_proposed", f"{item.ident}/call", item.at, **proposed)
        result: dict[str, Any] = {
            "round": number,
            "call_id": call_id,
            "tool": tool,
            "status": "error" if item.failed else "ok",
        }
        if item.has_result:
            if item.oversized and isinstance(item.result, str):
                raw = item.result.encode("utf-8", "surrogatepass")
                result["fingerprint"], result["empty"] = digest(raw, self.secret).hex(), False
            else:
                result["fingerprint"], result["empty"] = self._fingerprint(item)
        self._emit(run, "call_result", f"{item.ident}/result", item.until, **result)

    def _fingerprint(self, item: Observed) -> tuple[str, bool]:
        """The result's fingerprint as a runtime's client makes it; a result that has no
        canonical form (too deep, a number JSON cannot hold) is digested as it came."""
        value = item.result
        try:
            if self._patterns:  # the mode's volatile patterns, as the client applies them
                value, _ = declared_view(item.tool, value, [], None, self._patterns, self.secret)
            return fingerprint(value, self.secret)
        except (ValueError, RecursionError):
            self.counts["uncomparable_result"] += 1
            return digest(repr(item.result).encode("utf-8", "surrogatepass"), self.secret).hex(), False

    def _end(self, run: _Run, reason: str) -> None:
        if run.pending:
            self._close(run, everything=True)
        self._emit(run, "run_ended", "end", run.closed_until, reason=reason)
        del self.runs[run.run_id]
        self.ended[run.run_id] = None
        if len(self.ended) > MAX_ENDED:
            self.ended.popitem(last=False)

    def _emit(self, run: _Run, kind: str, what: str, at_ns: int, **fields: Any) -> None:
        """Event ids come from the spans (`what`): the same span read again after a restart, or
        sent again by an exporter, makes the same id, which the engine recognises."""
        event = envelope(kind, run.run_id, f"otlp/{run.run_id}/{what}", at_ns / 1e9, **fields)
        try:
            checked = validate_event(event, self.secret)
        except InvalidEvent as exc:  # never expected: the fields are built above; counted
            self.counts[f"invalid_{exc.reason}"] += 1
            return
        self.sink(checked)
