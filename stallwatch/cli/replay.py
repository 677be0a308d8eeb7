"""`stallwatch replay`: a recorded event log through the embedded engine, commands on stdout."""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from typing import BinaryIO

from stallwatch.contract.commands import Command, encode_command
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.fleet import Fleet, Rejected


@dataclass(frozen=True)
class ReplayEngine:
    """The engine a log is replayed on, set as the workers that read it were. `secret`: the
    fingerprint key the log's runtimes and workers used. `deadletter_raw`: the dead letters keep
    the start of each bad line (STALLWATCH_DEADLETTER_RAW). `advisory_key`: advisories count
    only when the fleet app signed them. `tenant`: the log is that tenant's events topic
    (STALLWATCH_TENANT), whose tenant every run gets, as its workers give it."""

    admin_policy: AdminPolicy | None = None
    secret: bytes | None = None
    deadletter_raw: bool = False
    advisory_key: bytes | None = None
    tenant: str | None = None

    def fleet(self) -> Fleet:
        return Fleet(self.admin_policy, secret=self.secret, deadletter_raw=self.deadletter_raw,
                     advisory_key=self.advisory_key, tenant=self.tenant)


def replay(source: BinaryIO, out: BinaryIO, err: BinaryIO, name: str = "-",
           engine: ReplayEngine = ReplayEngine()) -> tuple[int, int]:
    """Write each command as a JSON line to `out`, each dead letter to `err`; returns counts."""
    fleet = engine.fleet()
    commands = rejected = 0
    write, write_err = out.write, err.write
    for result in fleet.replay(source, name):
        if isinstance(result, Rejected):
            rejected += 1
            write_err(result.letter.encode() + b"\n")
        elif result:
            commands += len(result)
            write(command_lines(result))
    out.flush()
    err.flush()
    return commands, rejected


def command_lines(commands: list[Command]) -> bytes:
    """A line's commands, one JSON line each, for one write: `--jobs` writes the same pieces, so
    that sent to one file with the dead letters (2>&1) both buffers flush at the same points."""
    return b"".join(encode_command(command) + b"\n" for command in commands)


def main(path: str, engine: ReplayEngine, jobs: int = 1) -> int:
    """`jobs` above 1: the runs shared among that many processes (`replay_jobs`), the same output."""
    out, err = sys.stdout.buffer, sys.stderr.buffer
    if jobs > 1:
        from stallwatch.cli.replay_jobs import replay_jobs

        # SIGTERM as an exit, not a sudden end: the jobs are stopped and the temporary files
        # removed on the way out.
        signal.signal(signal.SIGTERM, _exit)
        replay_jobs(path, jobs, out, err, path, engine)
    elif path == "-":
        replay(sys.stdin.buffer, out, err, "-", engine)
    else:
        with open(path, "rb") as source:
            replay(source, out, err, path, engine)
    return 0


def _exit(signum: int, _: object) -> None:
    raise SystemExit(128 + signum)  # the shell's code for a process ended by that signal
