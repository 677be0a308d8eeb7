"""`stallwatch replay --jobs N`: a log's runs shared among N processes, their output in log order.

Runs are independent (a run's decisions read only its own events), so each job replays the runs
whose id hashes to it, as a worker owns a partition's runs, and the same bytes come out as from
one process: each job reads the whole log, keeps the lines of its runs and writes each line's
output, tagged with the line's number, to a file of its own; the parent merges the files by
number. Files, not pipes: a job ahead of the others would wait on a full pipe for the merge,
which waits on the job behind, and the jobs took turns (measured: no gain at all). Every job
reads every line's run id, as written when it can, else by a parse; that share is not divided
(docs/decisions.md, "Replay speed").
"""

from __future__ import annotations

import heapq
import multiprocessing
import os
import shutil
import signal
import stat
import struct
import sys
import tempfile
from collections.abc import Iterator
from contextlib import nullcontext
from typing import BinaryIO

import orjson
from xxhash import xxh3_64_intdigest

from stallwatch.cli.replay_engine import ReplayEngine, command_lines
from stallwatch.contract.events import RawEvent
from stallwatch.contract.limits import MAX_ID_CHARS
from stallwatch.contract.parse import MAX_EVENT_BYTES
from stallwatch.engine.embedded import Rejected

# A line's number, which stream its output goes to, and the output's length.
_HEADER = struct.Struct("<QBI")
_OUT, _ERR = 0, 1
_JSON_SPACE = b" \t\r\n"
# The longest run id in bytes (UTF-8) that is read without a parse: a longer one is refused
# anyway, and the full parse says so.
_LONGEST_ID = 4 * MAX_ID_CHARS
# A job's exit code when it was given a line of another job's run (a nested or repeated
# `"run_id"` key came first): the jobs run again, finding each line's run by a full parse.
MISROUTED = 3
# Each job's output is written and read back through buffers this large: a few system calls
# per thousand lines.
_BUFFER = 1 << 20


def replay_jobs(
    path: str, jobs: int, out: BinaryIO, err: BinaryIO, name: str, engine: ReplayEngine
) -> tuple[int, int]:
    """As `stallwatch.cli.replay.replay`, with the runs shared among `jobs` forked processes;
    `path` is a file, or - for standard input."""
    with tempfile.TemporaryDirectory(prefix="stallwatch-replay-") as folder:
        path = _whole_file(path, folder)
        outputs = [os.path.join(folder, f"job-{job}") for job in range(jobs)]
        if not _run_jobs(path, jobs, False, outputs, name, engine):
            _run_jobs(path, jobs, True, outputs, name, engine)
        commands = rejected = 0
        readers = [open(output, "rb", buffering=_BUFFER) for output in outputs]  # noqa: SIM115
        try:
            for _, stream, payload in heapq.merge(*map(_records, readers)):
                if stream == _OUT:
                    commands += payload.count(b"\n")
                    out.write(payload)
                else:
                    rejected += 1
                    err.write(payload)
        finally:
            for reader in readers:
                reader.close()
    out.flush()
    err.flush()
    return commands, rejected


def _run_jobs(path: str, jobs: int, exact: bool, outputs: list[str], name: str, engine: ReplayEngine) -> bool:
    """Run the jobs to their end; False when one was given a line of another's run."""
    context = multiprocessing.get_context("fork")  # the jobs share the parent's imports
    processes = [
        context.Process(
            target=_job, name=f"replay job {job}", args=(path, job, jobs, exact, outputs[job], name, engine)
        )
        for job in range(jobs)
    ]
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join()
    finally:  # the parent stopped (Ctrl-C, SIGTERM): no job outlives it, writing on
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join()
    codes = [process.exitcode for process in processes]
    failed = [p.name for p, code in zip(processes, codes, strict=True) if code not in (0, MISROUTED)]
    if failed:
        raise RuntimeError(f"{', '.join(failed)} failed (its error is above); nothing was written")
    return MISROUTED not in codes


def _whole_file(path: str, folder: str) -> str:
    """A file every job can read whole: `path` when it is a regular file; else (standard input,
    a pipe such as `<(...)` or /dev/stdin, of which each job would read a part) a copy of it in
    `folder`. Opened here, so that a missing file fails as in one process, before any job."""
    with nullcontext(sys.stdin.buffer) if path == "-" else open(path, "rb") as source:
        if path != "-" and stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            return path
        copy = os.path.join(folder, "log")
        with open(copy, "wb") as target:
            shutil.copyfileobj(source, target, _BUFFER)
    return copy


def owner(line: bytes, number: int, jobs: int, exact: bool = False) -> int | None:
    """The job that replays a line: its run's (hashed id modulo `jobs`); for a line that is no
    event of a run (its dead letter depends on no state), its number's; None for a blank line,
    which replay skips. Not `exact`: the run id as written plainly, else as parsed; the job
    that applies the line checks it (`_Share.check`)."""
    run_id = None if exact else _literal_run_id(line)
    if run_id is None and len(line) <= MAX_EVENT_BYTES:  # a larger one is refused unread
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            if not line or line.isspace():
                return None
        else:
            found = event.get("run_id") if type(event) is dict else None
            run_id = found.encode() if type(found) is str else None
    return number % jobs if run_id is None else job_of(run_id, jobs)


def job_of(run_id: bytes, jobs: int) -> int:
    """The job of a run, by its id's UTF-8."""
    return xxh3_64_intdigest(run_id) % jobs


def _literal_run_id(line: bytes) -> bytes | None:
    """The value of the first `"run_id"` key, when a plain string, without parsing the line (a
    full parse of every line was a third of each job's time); None otherwise. Usually the
    event's run id; not when a nested key comes first, or the line repeats the key."""
    at = line.find(b'"run_id"')
    if at < 0:
        return None
    start = line.find(b'"', at + 8) + 1
    end = line.find(b'"', start)
    if (
        start == 0
        or end < 0
        or end - start > _LONGEST_ID
        or line.find(b"\\", start, end) >= 0
        or line[at + 8 : start - 1].strip(_JSON_SPACE) != b":"
    ):
        return None  # not a string, too long to be an id, or escaped: parsed instead
    return line[start:end]


def _job(path: str, job: int, jobs: int, exact: bool, output: str, name: str, engine: ReplayEngine) -> None:
    """One job, in its own process: replay the log's lines it owns into `output`, each line's
    output tagged with its number. Exits MISROUTED when a line of another job's run came."""
    # Stopped by the parent alone: Ctrl-C reaches the whole group, and a traceback per job
    # would bury the parent's.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    embedded = engine.build()
    with open(path, "rb", buffering=_BUFFER) as log, open(output, "wb", buffering=_BUFFER) as tagged:
        share = _Share(log, job, jobs, exact)
        try:
            for result in embedded.replay(share, name, line_number=share.current, applied=share.check):
                if isinstance(result, Rejected):
                    payload, stream = result.letter.encode() + b"\n", _ERR
                elif result:
                    payload, stream = command_lines(result), _OUT
                else:
                    continue
                tagged.write(_HEADER.pack(share.number, stream, len(payload)))
                tagged.write(payload)
        except _Misrouted:
            sys.exit(MISROUTED)


class _Misrouted(BaseException):
    """A line whose run belongs to another job: its key was not the event's run id. A signal
    that ends the job's replay, so not an Exception: the engine keeps every Exception raised
    while it applies an event with that event (stallwatch.engine.records)."""


class _Share:
    """The lines of one job's runs, in log order; `number` is the log line last handed out,
    which is the line the engine is applying, since it takes the next only when done."""

    def __init__(self, log: BinaryIO, job: int, jobs: int, exact: bool) -> None:
        self.log, self.job, self.jobs, self.exact = log, job, jobs, exact
        self.number = -1

    def __iter__(self) -> Iterator[bytes]:
        job, jobs, exact = self.job, self.jobs, self.exact
        for number, line in enumerate(self.log):
            if owner(line, number, jobs, exact) == job:
                self.number = number
                yield line

    def current(self, _: int) -> int:
        return self.number

    def check(self, _: int, event: RawEvent, state: object, commands: object) -> None:
        """After each event applied: its run is this job's, or the whole replay is redone with
        every line parsed to find its run (a run seen by two jobs answers wrongly in both)."""
        if job_of(event["run_id"].encode(), self.jobs) != self.job:
            raise _Misrouted


def _records(reader: BinaryIO) -> Iterator[tuple[int, int, bytes]]:
    """A job's tagged outputs, read back: (line number, stream, payload)."""
    size = _HEADER.size
    while header := reader.read(size):
        number, stream, length = _HEADER.unpack(header)
        yield number, stream, reader.read(length)
