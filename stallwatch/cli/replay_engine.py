"""What a replay runs on (the engine set as the log's workers were) and how it writes a line's
commands: shared by one process (`replay`) and its jobs (`replay_jobs`)."""

from __future__ import annotations

from dataclasses import dataclass

from stallwatch.contract.commands import Command, encode_command
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.embedded import EmbeddedEngine


@dataclass(frozen=True)
class ReplayEngine:
    """The engine a log is replayed on, set as the workers that read it were. `secret`: the
    fingerprint key the log's runtimes and workers used. `deadletter_raw`: the dead letters keep
    the start of each bad line (STALLWATCH_DEADLETTER_RAW). `advisory_key`: advisories count
    only when the fleet app signed them. `tenant`: the log is that tenant's events topic
    (STALLWATCH_TENANT), whose tenant every run gets, as its workers give it; without one, the
    log is the shared events topic, where an event naming a tenant is refused, as there."""

    admin_policy: AdminPolicy | None = None
    secret: bytes | None = None
    deadletter_raw: bool = False
    advisory_key: bytes | None = None
    tenant: str | None = None

    def build(self) -> EmbeddedEngine:
        return EmbeddedEngine(
            self.admin_policy,
            secret=self.secret,
            deadletter_raw=self.deadletter_raw,
            advisory_key=self.advisory_key,
            tenant=self.tenant,
            shared_topic=True,
        )


def command_lines(commands: list[Command]) -> bytes:
    """A line's commands, one JSON line each, for one write: `--jobs` writes the same pieces, so
    that sent to one file with the dead letters (2>&1) both buffers flush at the same points."""
    return b"".join(encode_command(command) + b"\n" for command in commands)
