"""`stallwatch explain RUN_ID [FILE]`: one run's timeline.

From a recorded event log: replays the whole log through the embedded engine (so the run is
judged exactly as the workers judge it) and prints, round by round, what ran, what was refused
and why, whether the round brought a new fact, both streaks, nudges and the stop.
Without a file: reads the run's commands from the commands topic (only the partition its id
maps to) and prints its refusals, nudges and stop, round by round.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from typing import TextIO

from aiokafka import TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import ConsumerRecord

from stallwatch.cli.top import partitions_of, started
from stallwatch.contract.advisories import advisory_key_of
from stallwatch.contract.commands import Command, ConflictingCommand, FirstCopies, decode_command
from stallwatch.contract.parse import InvalidEvent, parse_event
from stallwatch.contract.stop_codes import STOPS
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import secret_from_key
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.engine.names import printable
from stallwatch.engine.state import RunState
from stallwatch.kafka.options import aiokafka_options
from stallwatch.kafka.read import committed_reader, read_to_end
from stallwatch.settings import Settings, reveal


def explain(
    run_id: str,
    lines: Iterable[bytes],
    out: TextIO,
    admin_policy: AdminPolicy | None = None,
    secret: bytes | None = None,
    advisory_key: bytes | None = None,
) -> bool:
    """Write the run's timeline; False when the log has no event of that run. Every field taken
    from the log is `printable`: no event can write a control character to the terminal."""
    fleet = EmbeddedEngine(admin_policy, secret=secret, advisory_key=advisory_key)
    calls: dict[str, str] = {}
    seen = False
    for line in lines:
        if not line.strip():
            continue
        try:
            event = parse_event(line, secret=secret)
        except InvalidEvent:
            continue
        commands = fleet.handle(event)
        if event["run_id"] != run_id:
            continue
        seen = True
        state = fleet.runs.get(run_id)
        kind = event["type"]
        if kind == "run_started":
            out.write(
                f"run {printable(run_id)} ({event['mode']}), tools: "
                f"{', '.join(printable(t['name']) for t in event.get('tools') or []) or 'none'}\n"
            )
        elif kind == "round_started":
            out.write(f"round {event['round']}\n")
        elif kind == "call_proposed":
            calls[event["call_id"]] = f"{printable(event['tool'])}({_short(event.get('args'))})"
        elif kind == "round_ended" and state is not None:
            new = "yes" if state.round_new_fact or state.round_results < state.round_allowed else "no"
            out.write(
                f"  end of round {event['round']}: {state.round_allowed} ran, "
                f"{state.round_proposed - state.round_allowed} refused; new fact: "
                f"{new if state.round_allowed else '-'}; already-seen streak "
                f"{state.already_seen_streak}, all-refused streak {state.all_refused_streak}"
                f"{_workspace(state)}\n"
            )
        elif kind == "run_ended":
            out.write(f"run ended: {printable(event.get('reason') or 'no reason given')}\n")
        for command in commands:
            write_command(command, out, calls)
    if not seen:
        out.write(f"no event of run {printable(repr(run_id))} in the log\n")
    return seen


def _workspace(state: RunState) -> str:
    """Coder runs: where the workspace stands and which calls are stalled (same result after
    changes)."""
    if state.mode != "coder":
        return ""
    stalled = sum(1 for entry in state.call_history.values() if entry[1] >= 2)
    return f"; workspace version {state.workspace_version}, stalled calls {stalled}"


def _short(value: object, width: int = 60) -> str:
    text = str(value)
    return printable(text if len(text) <= width else text[: width - 3] + "...")


def write_command(command: Command, out: TextIO, calls: dict[str, str]) -> None:
    """One command's line; `calls` (call id to its shown call) already `printable`. A command
    read from the topic is validated, not trusted: its strings are `printable` too."""
    reason = printable(command.reason)
    if command.type == "verdict" and command.decision == "refuse":
        call = calls.get(command.call_id) or printable(command.tool or command.call_id)
        out.write(f"  refused {call} [{command.code}]: {reason}\n")
    elif command.type == "verdict" and command.would_code is not None:
        call = calls.get(command.call_id) or printable(command.tool or command.call_id)
        would = printable(command.would_reason or "")
        out.write(f"  would have refused {call} [{command.would_code}] (observe-only, allowed): {would}\n")
    elif command.type in ("nudge", "would_nudge"):
        kind = "stall nudge" if "same_result_runs" in command.detail else "nudge"
        prefix = "would have sent a " if command.type == "would_nudge" else ""
        out.write(f"  {prefix}{kind}: {reason}\n")
    elif command.type in ("stop", "would_stop"):
        stop_kind = STOPS.get(command.code)
        fired = (
            ""
            if stop_kind is None
            else printable(f"{stop_kind.fired} {command.detail.get(stop_kind.fired)}; ")
        )
        head = (
            "WOULD HAVE STOPPED (observe-only, the run went on)" if command.type == "would_stop" else "STOP"
        )
        out.write(
            f"  {head} at round {command.round} [{command.code}, {command.action}] "
            f"{fired}{printable(command.detail)}: {reason}\n"
        )


async def explain_from_topic(run_id: str, settings: Settings, out: TextIO) -> bool:
    """The run's commands from its partition of the commands topic, read up to the end."""
    options = aiokafka_options(settings)
    partitions = sorted(await partitions_of(settings, settings.commands_topic))
    tp = TopicPartition(
        settings.commands_topic, DefaultPartitioner()(run_id.encode(), partitions, partitions)
    )
    consumer = committed_reader(options)
    await started(consumer, settings)
    seen = False
    round_no = None
    copies = FirstCopies()

    def show(_: TopicPartition, records: list[ConsumerRecord]) -> None:
        nonlocal seen, round_no
        for record in records:
            if record.key != run_id.encode():
                continue
            command = decode_command(record.value)
            if not copies.first(command.command_id, record.value):
                continue  # published again after a worker's restart: the same command
            seen = True
            if command.round != round_no:
                round_no = command.round
                out.write(f"round {round_no}\n")
            if command.type == "verdict" and command.decision == "allow" and command.would_code is None:
                out.write(f"  allowed {printable(command.tool or command.call_id)}\n")
            write_command(command, out, {})

    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        await read_to_end(consumer, [tp], show)
    finally:
        await consumer.stop()
    if not seen:
        out.write(f"no command of run {printable(repr(run_id))} in {settings.commands_topic}\n")
    return seen


def main(run_id: str, path: str | None, settings: Settings) -> int:
    if path is None:
        try:
            return 0 if asyncio.run(explain_from_topic(run_id, settings, sys.stdout)) else 1
        except ConflictingCommand as exc:
            sys.stderr.write(f"stallwatch explain: {exc}: the workers broke the contract\n")
            return 1
    return explain_file(
        run_id,
        path,
        AdminPolicy.of(settings),
        secret_from_key(reveal(settings.fingerprint_key)),
        advisory_key_of(reveal(settings.advisory_key)),
    )


def explain_file(
    run_id: str,
    path: str,
    admin_policy: AdminPolicy | None = None,
    secret: bytes | None = None,
    advisory_key: bytes | None = None,
) -> int:
    if path == "-":
        return 0 if explain(run_id, sys.stdin.buffer, sys.stdout, admin_policy, secret, advisory_key) else 1
    with open(path, "rb") as source:
        return 0 if explain(run_id, source, sys.stdout, admin_policy, secret, advisory_key) else 1
