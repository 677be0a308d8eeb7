"""`stallwatch replay`: a recorded event log through the embedded engine, commands on stdout."""

from __future__ import annotations

import signal
import sys
from typing import BinaryIO

from stallwatch.cli.replay_engine import ReplayEngine, command_lines
from stallwatch.cli.replay_jobs import replay_jobs
from stallwatch.engine.embedded import Rejected


def replay(
    source: BinaryIO, out: BinaryIO, err: BinaryIO, name: str = "-", engine: ReplayEngine | None = None
) -> tuple[int, int]:
    """Write each command as a JSON line to `out`, each dead letter to `err`; returns counts."""
    embedded = (engine or ReplayEngine()).build()
    commands = rejected = 0
    write, write_err = out.write, err.write
    for result in embedded.replay(source, name):
        if isinstance(result, Rejected):
            rejected += 1
            write_err(result.letter.encode() + b"\n")
        elif result:
            commands += len(result)
            write(command_lines(result))
    out.flush()
    err.flush()
    return commands, rejected


def main(path: str, engine: ReplayEngine, jobs: int = 1) -> int:
    """`jobs` above 1: the runs shared among that many processes (`replay_jobs`), the same output."""
    out, err = sys.stdout.buffer, sys.stderr.buffer
    if jobs > 1:
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
