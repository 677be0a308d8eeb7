"""Per-batch partial counts per (tenant, tool) for the fleet app: pure, no I/O.

The decision worker writes them inside the batch's transaction to `{prefix}.tallies`, so a
read_committed reader sees each batch's counts exactly once. Digests only, never content:
result fingerprints and argument digests as the engine computes them (keyed when a key is set).
"""

from __future__ import annotations

from typing import Any

import orjson

from stallwatch.contract.commands import Command
from stallwatch.contract.events import FAILED_STATUSES
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import call_signature, digest, fact_digest
from stallwatch.engine.state import RunState

TALLY_VERSION = 1
# Caps of one record (docs/contract.md, the tallies topic): a batch of one tool called
# by thousands of runs, or answering thousands of questions, stays a small record; what is left
# out is counted in `dropped`.
MAX_RUN_IDS = 64
MAX_ANSWERS = 16
MAX_ARGS = 16
# Calls proposed and not yet answered, remembered across batches so a result can name its
# call's argument digest: bounded so a flood of unanswered calls cannot grow the worker's memory
# (past it, the oldest go: their results then count in `calls` but not in `answers`).
MAX_PENDING_CALLS = 32_768
# Runs whose last refusal (duplicate/repeated call) named a tool, for an `all_refused` stop.
MAX_REFUSING_RUNS = 8_192
_REPEAT_REFUSALS = frozenset(("duplicate_call", "repeated_call"))
_SEP = "\x1f"


class _Tally:
    """One (tenant, tool)'s counts in one batch."""

    __slots__ = ("answers", "calls", "dropped", "failures", "runs", "stops", "tenant", "tool", "ts")

    def __init__(self, tenant: str | None, tool: str) -> None:
        self.tenant, self.tool = tenant, tool
        self.ts = 0.0
        self.calls = self.failures = self.dropped = 0
        self.runs: dict[str, None] = {}
        self.stops: dict[str, None] = {}
        self.answers: dict[str, tuple[dict[str, None], dict[str, None]]] = {}

    def add_run(self, run_id: str, into: dict[str, None]) -> None:
        if run_id not in into:
            if len(into) < MAX_RUN_IDS:
                into[run_id] = None
            else:
                self.dropped += 1

    def add_answer(self, fingerprint: str, run_id: str, args: str | None) -> None:
        answer = self.answers.get(fingerprint)
        if answer is None:
            if len(self.answers) >= MAX_ANSWERS:
                self.dropped += 1
                return
            answer = self.answers[fingerprint] = ({}, {})
        self.add_run(run_id, answer[0])
        if args is not None and args not in answer[1]:
            if len(answer[1]) < MAX_ARGS:
                answer[1][args] = None
            else:
                self.dropped += 1

    def record(self) -> tuple[bytes, bytes]:
        value = {
            "v": TALLY_VERSION,
            "tenant": self.tenant,
            "tool": self.tool,
            "ts": self.ts,
            "calls": self.calls,
            "failures": self.failures,
            "runs": list(self.runs),
            "stops": list(self.stops),
            "answers": [
                {"fingerprint": fp, "runs": list(runs), "args": list(args)}
                for fp, (runs, args) in self.answers.items()
            ],
            "dropped": self.dropped,
        }
        return tally_key(self.tenant, self.tool), orjson.dumps(value)


def tally_key(tenant: str | None, tool: str) -> bytes:
    """The record key: tenant ("" when null), the unit separator, the tool."""
    return f"{tenant or ''}{_SEP}{tool}".encode()


class Tallies:
    """Counts one batch's events per (tenant, tool); `records()` ends the batch. Remembers
    pending calls' argument digests (bounded) across batches of the same worker."""

    def __init__(self, secret: bytes | None = None, admin_policy: AdminPolicy | None = None) -> None:
        self.secret = secret
        self.admin_policy = admin_policy or AdminPolicy()
        self._batch: dict[tuple[str | None, str], _Tally] = {}
        self._pending: dict[tuple[str, str], str | None] = {}  # (run, call) -> args digest hex
        self._refused: dict[str, str] = {}  # run -> tool of its last repeat refusal

    def observe(self, event: dict[str, Any], state: RunState | None, commands: list[Command]) -> None:
        """One applied event, the state it left and the commands it caused."""
        if state is None:
            return  # an unknown run: no tenant, no judgement either
        kind = event["type"]
        if kind == "call_proposed":
            self._on_call(event, state)
        elif kind == "call_result":
            self._on_result(event, state)
        if commands:
            self._on_commands(event, state, commands)

    def records(self) -> list[tuple[bytes, bytes]]:
        """The batch's records (key, value), one per (tenant, tool) touched; resets the batch."""
        out = [tally.record() for tally in self._batch.values()]
        self._batch = {}
        return out

    def _tally(self, state: RunState, tool: str, ts: float) -> _Tally:
        key = (state.tenant, tool)
        tally = self._batch.get(key)
        if tally is None:
            tally = self._batch[key] = _Tally(state.tenant, tool)
        if ts > tally.ts:
            tally.ts = ts
        return tally

    def _on_call(self, event: dict[str, Any], state: RunState) -> None:
        tool, run_id = event["tool"], event["run_id"]
        tally = self._tally(state, tool, event["ts"])
        tally.add_run(run_id, tally.runs)
        if self._never_an_answer(state, tool):
            return
        given = event.get("args_digest")
        if given is not None:
            args: str | None = _as_digest(given, self.secret)
        else:
            signature = call_signature(tool, event.get("args"), self.secret)
            args = None if signature is None else signature.hex()
        pending = self._pending
        pending[(run_id, event["call_id"])] = args
        if len(pending) > MAX_PENDING_CALLS:
            del pending[next(iter(pending))]

    def _on_result(self, event: dict[str, Any], state: RunState) -> None:
        tool, run_id = event["tool"], event["run_id"]
        tally = self._tally(state, tool, event["ts"])
        tally.calls += 1
        tally.add_run(run_id, tally.runs)
        call = (run_id, event["call_id"])
        if event["status"] in FAILED_STATUSES:
            tally.failures += 1
            self._pending.pop(call, None)
            return
        if call not in self._pending:
            return  # never an answer (exempt, approval), or its proposal was forgotten
        args = self._pending.pop(call)
        fingerprint = self._fingerprint(event)
        if fingerprint is not None:
            tally.add_answer(fingerprint, run_id, args)

    def _on_commands(self, event: dict[str, Any], state: RunState, commands: list[Command]) -> None:
        """Stops naming a tool: `tool_failures` names its tool; `all_refused` the tool of the
        run's last repeat refusal (duplicate or repeated call)."""
        run_id = event["run_id"]
        for command in commands:
            if command.type == "verdict":
                # An observe-only run's would-have refusal counts as the refusal would have.
                code = command.code if command.would_code is None else command.would_code
                if code in _REPEAT_REFUSALS and command.tool is not None:
                    refused = self._refused
                    refused.pop(run_id, None)  # re-inserted last: the oldest go first past the cap
                    refused[run_id] = command.tool
                    if len(refused) > MAX_REFUSING_RUNS:
                        del refused[next(iter(refused))]
            elif command.type in ("stop", "would_stop"):
                # A would-have stop counts as a stop: the fleet's incidents open all the same.
                tool = (
                    command.detail.get("tool")
                    if command.code == "tool_failures"
                    else self._refused.get(run_id)
                    if command.code == "all_refused"
                    else None
                )
                self._refused.pop(run_id, None)
                if tool is not None:
                    tally = self._tally(state, tool, event["ts"])
                    tally.add_run(run_id, tally.stops)

    def _never_an_answer(self, state: RunState, tool: str) -> bool:
        return (
            tool in state.approval_tools
            or tool in state.exempt_tools
            or self.admin_policy.requires_approval(tool)
            or self.admin_policy.repeat_exempt(tool)
        )

    def _fingerprint(self, event: dict[str, Any]) -> str | None:
        """The result's digest (hex), None for an empty result or one without content."""
        if "result" in event:
            try:
                found = fact_digest(event["result"], self.secret)
            except ValueError:
                return None
            return None if found is None else found.hex()
        given = event.get("fingerprint")
        if given is None or event.get("empty"):
            return None
        return _as_digest(given, self.secret)


def _as_digest(text: str, secret: bytes | None) -> str:
    """A runtime's fingerprint or argument digest as the engine reads it: 32 hex digits are a
    digest already (keyed by the runtime); any other text is hashed."""
    if len(text) == 32:
        try:
            return bytes.fromhex(text).hex()
        except ValueError:
            pass
    return digest(text.encode(), secret).hex()
