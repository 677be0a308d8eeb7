"""`stallwatch replay`: a recorded event log through the embedded engine, commands on stdout."""

from __future__ import annotations

import signal
import sys
from typing import BinaryIO

from stallwatch.contract.commands import Command, encode_command
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.fleet import Fleet, Rejected


def replay(source: BinaryIO, out: BinaryIO, err: BinaryIO, name: str = "-",
           admin_policy: AdminPolicy | None = None, secret: bytes | None = None,
           deadletter_raw: bool = False, advisory_key: bytes | None = None) -> tuple[int, int]:
    """Write each command as a JSON line to `out`, each dead letter to `err`; returns counts.
    `secret`: the fingerprint key the log's runtimes and workers used. `deadletter_raw`: the
    dead letters keep the start of each bad line (STALLWATCH_DEADLETTER_RAW)."""
    fleet = Fleet(admin_policy, secret=secret, deadletter_raw=deadletter_raw,
                  advisory_key=advisory_key)
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


def main(path: str, admin_policy: AdminPolicy | None = None, secret: bytes | None = None,
         jobs: int = 1, deadletter_raw: bool = False, advisory_key: bytes | None = None) -> int:
    """`jobs` above 1: the runs shared among that many processes (`replay_jobs`), the same output."""
    out, err = sys.stdout.buffer, sys.stderr.buffer
    if jobs > 1:
        from stallwatch.cli.replay_jobs import replay_jobs

        # SIGTERM as an exit, not a sudden end: the jobs are stopped and the temporary files
        # removed on the way out.
        signal.signal(signal.SIGTERM, _exit)
        replay_jobs(path, jobs, out, err, path, admin_policy, secret, deadletter_raw, advisory_key)
    elif path == "-":
        replay(sys.stdin.buffer, out, err, "-", admin_policy, secret, deadletter_raw, advisory_key)
    else:
        with open(path, "rb") as source:
            replay(source, out, err, path, admin_policy, secret, deadletter_raw, advisory_key)
    return 0


def _exit(signum: int, _: object) -> None:
    raise SystemExit(128 + signum)  # the shell's code for a process ended by that signal
