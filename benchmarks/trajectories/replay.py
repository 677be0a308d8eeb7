"""Replays one recorded run through the engine, call by call, as a runtime would have sent it."""

# A refused call did not run: its recorded observation is withheld (no call_result), and the
# refusal is checked against the last executed run of the same call (did the withheld output
# differ from what the model had already seen? compared as text, so any difference counts).
# The run ends at its stop: the rounds after the stop round are the steps stallwatch would have
# saved.

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from benchmarks.trajectories.runlog import (
    Call,
    Trajectory,
    call_proposed,
    call_result,
    envelope,
    run_started,
)
from stallwatch.engine.canonical import call_signature
from stallwatch.engine.embedded import EmbeddedEngine, Rejected
from stallwatch.engine.masks import DEFAULT_VOLATILE_PATTERNS, effective_patterns, mask_strings

# A loop, for the check: the same call with the same result (or error) this many times in a row.
LOOP_LENGTH = 5
# ...which must be stopped within this many rounds of its start (its first round counts).
LOOP_STOP_WITHIN = 6


@dataclass(slots=True)
class Refusal:
    round: int
    code: str
    call: Call
    changed: bool  # the withheld output differs from the last executed run of the same call


@dataclass(slots=True)
class Loop:
    """A recorded loop: `length` calls in a row with one signature and one result."""

    start_round: int
    length: int
    call: Call


@dataclass(slots=True)
class Outcome:
    traj: Trajectory
    refusals: list[Refusal] = field(default_factory=list)
    nudges: list[tuple[int, str]] = field(default_factory=list)  # (round, kind: nudge_kind)
    stop_round: int | None = None
    stop_code: str | None = None
    loops: list[Loop] = field(default_factory=list)

    @property
    def steps_saved(self) -> int:
        """Recorded rounds after the stop round: what the agent would not have spent."""
        return 0 if self.stop_round is None else max(0, len(self.traj.steps) - self.stop_round)

    @property
    def new_after_stop(self) -> int:
        """Recorded calls after the stop round that were not a repeat, with the same result, of a
        call made up to the stop: 0 means the stop cut off nothing the run had not seen."""
        if self.stop_round is None:
            return 0
        seen: set[tuple] = set()
        new = 0
        for number, call in self.traj.calls:
            key = (
                call_signature(call.tool, call.args),
                call.status,
                mask_strings(call.output, DEFAULT_VOLATILE_PATTERNS),
            )
            if number <= self.stop_round:
                seen.add(key)
            elif key not in seen:
                new += 1
        return new

    def stopped_in_time(self, loop: Loop) -> bool:
        return self.stop_round is not None and self.stop_round < loop.start_round + LOOP_STOP_WITHIN


def replay(
    traj: Trajectory, mode: str, engine: EmbeddedEngine | None = None, policy: dict[str, Any] | None = None
) -> Outcome:
    """Feeds the run to `engine` (a fresh one by default), with `policy` overriding the mode's
    defaults, and collects what the engine decided."""
    engine = engine or EmbeddedEngine()
    out = Outcome(traj, loops=find_loops(traj))
    seq = 0

    def send(event: dict, call: Call | None = None) -> list:
        nonlocal seq
        seq += 1
        commands = engine.handle_raw(orjson.dumps(event))
        if isinstance(commands, Rejected):
            raise ValueError(f"{traj.run_id}: event rejected: {commands.letter.error}")
        for command in commands:
            if command.type == "stop" and out.stop_round is None:
                out.stop_round, out.stop_code = command.round, command.code
            elif command.type == "nudge":
                out.nudges.append((command.round, nudge_kind(command.detail, call)))
        return commands

    send(run_started(traj, mode, policy))
    last_seen: dict[bytes | None, tuple[str, str]] = {}  # signature -> (status, output) last run
    for number, step in enumerate(traj.steps, 1):
        if out.stop_round is not None:
            break
        send(envelope(traj.run_id, seq, "round_started", round=number))
        for index, call in enumerate(step):
            call_id = f"{number}.{index}"
            verdicts = [
                c
                for c in send(call_proposed(traj.run_id, seq, number, call_id, call, mode))
                if c.type == "verdict"
            ]
            signature = call_signature(call.tool, call.args)
            if verdicts and verdicts[0].decision == "refuse":
                if verdicts[0].code != "run_stopped":
                    previous = last_seen.get(signature)
                    changed = previous is not None and previous != (call.status, call.output)
                    out.refusals.append(Refusal(number, verdicts[0].code, call, changed))
                continue
            last_seen[signature] = (call.status, call.output)
            send(call_result(traj.run_id, seq, number, call_id, call), call)
        send(envelope(traj.run_id, seq, "round_ended", round=number))
    send(envelope(traj.run_id, seq, "run_ended", reason="replayed"))
    engine.runs.pop(traj.run_id, None)  # one run at a time: keep the engine small
    return out


def nudge_kind(detail: dict[str, Any], call: Call | None) -> str:
    """`already-seen` (the streak nudge of a round), or `stall:` and what the stalled call was:
    `empty` when it printed nothing, else its effect (`unknown` covers code and test runs)."""
    if "same_result_runs" not in detail or call is None:
        return "already-seen"
    return f"stall:{'empty' if not call.output else call.effect}"


def find_loops(traj: Trajectory) -> list[Loop]:
    """Runs of LOOP_LENGTH or more consecutive calls with the same signature and result, results
    compared as coder mode compares them (the tool's volatile patterns masked): a failure that
    differs only in a shell's line counter is the same failure."""
    patterns = {t["name"]: effective_patterns("coder", t.get("volatile_patterns")) for t in traj.tools}
    loops: list[Loop] = []
    streak: list[tuple[int, Call]] = []
    for number, call in traj.calls:
        if streak and _same(streak[-1][1], call, patterns.get(call.tool, DEFAULT_VOLATILE_PATTERNS)):
            streak.append((number, call))
            continue
        if len(streak) >= LOOP_LENGTH:
            loops.append(Loop(streak[0][0], len(streak), streak[0][1]))
        streak = [(number, call)]
    if len(streak) >= LOOP_LENGTH:
        loops.append(Loop(streak[0][0], len(streak), streak[0][1]))
    return loops


def _same(a: Call, b: Call, patterns: tuple[str, ...]) -> bool:
    return (
        a.status == b.status
        and mask_strings(a.output, patterns) == mask_strings(b.output, patterns)
        and call_signature(a.tool, a.args) == call_signature(b.tool, b.args)
    )
