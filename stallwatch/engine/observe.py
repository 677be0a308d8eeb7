"""Observe-only: decisions computed and recorded as usual, none of them acted on by the runtime."""

from __future__ import annotations

from stallwatch.contract.commands import Command, Verdict, WouldNudge, WouldStop, content_id
from stallwatch.engine.words import ALLOWED


def would_have(command: Command) -> Command:
    """The observe-only form of a command: a refusal becomes an allowing verdict that carries
    it, a stop or a nudge its `would_` type; anything else is unchanged. Its id is derived again
    from its new content (`content_id`), so that one id never carries two contents."""
    observed: Command
    if command.type == "verdict" and command.decision == "refuse":
        observed = Verdict(
            command_id=command.command_id,
            run_id=command.run_id,
            caused_by=command.caused_by,
            round=command.round,
            call_id=command.call_id,
            decision="allow",
            code=None,
            reason=ALLOWED,
            tool=command.tool,
            would_code=command.code,
            would_reason=command.reason,
        )
    elif command.type == "stop":
        observed = WouldStop(
            command_id=command.command_id,
            run_id=command.run_id,
            caused_by=command.caused_by,
            round=command.round,
            code=command.code,
            action=command.action,
            reason=command.reason,
            detail=command.detail,
        )
    elif command.type == "nudge":
        observed = WouldNudge(
            command_id=command.command_id,
            run_id=command.run_id,
            caused_by=command.caused_by,
            round=command.round,
            reason=command.reason,
            detail=command.detail,
        )
    else:
        return command
    observed.command_id = content_id(observed)
    return observed
