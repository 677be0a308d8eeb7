"""`stallwatch replay --jobs N`: the same bytes as one process, whatever the log holds."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from benchmarks.replay_hashes import mixed_log
from stallwatch.cli.replay import replay
from stallwatch.cli.replay_engine import ReplayEngine
from stallwatch.cli.replay_jobs import _literal_run_id, owner, replay_jobs
from stallwatch.contract.envelope import envelope
from stallwatch.engine.canonical import derive_secret
from stallwatch.engine.embedded import EmbeddedEngine
from tests.waiting import wait_until


def sequential(path: Path, secret: bytes | None = None) -> tuple[bytes, bytes, tuple[int, int]]:
    out, err = io.BytesIO(), io.BytesIO()
    with path.open("rb") as source:
        counts = replay(source, out, err, "log", ReplayEngine(secret=secret))
    return out.getvalue(), err.getvalue(), counts


def in_jobs(path: Path, jobs: int, secret: bytes | None = None) -> tuple[bytes, bytes, tuple[int, int]]:
    out, err = io.BytesIO(), io.BytesIO()
    counts = replay_jobs(str(path), jobs, out, err, "log", ReplayEngine(secret=secret))
    return out.getvalue(), err.getvalue(), counts


def written(tmp_path: Path, lines: list[bytes]) -> Path:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.mark.parametrize("jobs", [2, 3])
@pytest.mark.parametrize("keyed", [False, True])
def test_jobs_write_the_same_commands_and_dead_letters_as_one_process(tmp_path, jobs, keyed):
    """Every mode and declaration, redeliveries near and beyond the id window, and bad input of
    every kind the parser names (blank lines, a line over the size limit, invalid UTF-8)."""
    secret = derive_secret("jobs test key") if keyed else None
    path = written(tmp_path, mixed_log(runs=200, seed=7))
    out, err, counts = sequential(path, secret)
    assert counts[0] > 1000 and counts[1] > 20  # the log reaches commands and dead letters
    assert in_jobs(path, jobs, secret) == (out, err, counts)


def test_a_run_id_key_nested_first_misroutes_the_quick_reading_and_the_jobs_redo_it_exactly(tmp_path):
    """The quick reading takes the first `"run_id"` key; an event whose arguments hold one first
    goes to the wrong job. That job finds out when it applies the event, and the replay is
    redone with every line parsed: still the same output."""
    lines = []
    for run in ("alpha", "beta"):
        lines.append(orjson.dumps(envelope("run_started", run, f"{run}-0", 1, mode="researcher")))
    for i in range(1, 30):
        for run in ("alpha", "beta"):
            other = "beta" if run == "alpha" else "alpha"
            call = {
                "args": {"run_id": other, "q": f"question {i % 4}"},
                **envelope("call_proposed", run, f"{run}-{i}", i, round=i, call_id=f"c{i}", tool="search"),
            }
            lines.append(orjson.dumps(call))
    path = written(tmp_path, lines)
    misrouted = [
        line
        for number, line in enumerate(lines)
        if owner(line, number, 2) != owner(line, number, 2, exact=True)
    ]
    assert misrouted  # the quick reading is wrong for these lines: the check must catch them
    assert in_jobs(path, 2) == sequential(path)


@pytest.mark.parametrize(
    "line, run_id",
    [
        (b'{"v":1,"run_id":"r-1","type":"round_started"}', b"r-1"),
        (b'{"run_id" :\t "r 2" , "v":1}', b"r 2"),
        (b'{"run_id":"caf\xc3\xa9"}', "café".encode()),
        (b'{"run_id":"a\\"b"}', None),  # an escape: parsed instead
        (b'{"run_\\u0069d":"r"}', None),  # the key itself escaped: never found, parsed
        (b'{"run_id":7}', None),
        (b'{"run_id":"' + b"x" * 600 + b'"}', None),  # too long for an id: parsed, then refused
        (b'{"tool":"run_id","v":1}', None),  # a value, not a key
        (b"", None),
    ],
)
def test_the_quick_reading_takes_only_a_plain_string_after_the_key(line, run_id):
    assert _literal_run_id(line) == run_id


def test_a_blank_line_goes_to_no_job_and_bad_input_to_one():
    assert owner(b"   \r\n", 4, 3) is None
    assert owner(b"not json\n", 4, 3) == 4 % 3
    assert owner(b'{"run_id": 5}\n', 5, 3) == 5 % 3


def test_a_job_that_fails_fails_the_replay_and_writes_nothing(tmp_path, monkeypatch):
    class Failing(EmbeddedEngine):
        """A job's engine that fails (a full disk, a bug): the forked jobs inherit it."""

        def replay(self, *args: object, **kwargs: object) -> Iterator[object]:
            raise OSError("the job's own failure")

    class FailingEngine(ReplayEngine):
        def build(self) -> EmbeddedEngine:
            return Failing()

    out, err = io.BytesIO(), io.BytesIO()
    with pytest.raises(RuntimeError, match="replay job 0"):
        replay_jobs(str(written(tmp_path, mixed_log(runs=5, seed=1))), 2, out, err, "log", FailingEngine())
    assert out.getvalue() == err.getvalue() == b""


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stallwatch.cli.main", "replay", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_the_command_line_takes_jobs_from_standard_input_too(tmp_path):
    path = written(tmp_path, mixed_log(runs=60, seed=3))
    one = cli(str(path))
    assert one.returncode == 0 and one.stdout
    from_file = cli("--jobs", "2", str(path))
    from_stdin = cli("--jobs", "3", "-", stdin=path.read_bytes())
    assert (from_file.returncode, from_file.stdout) == (0, one.stdout)
    assert from_file.stderr == one.stderr
    # Read from standard input, the dead letters name "-" as their topic, as one process does.
    assert (from_stdin.returncode, from_stdin.stdout) == (0, one.stdout)
    assert from_stdin.stderr == cli("-", stdin=path.read_bytes()).stderr


@pytest.mark.parametrize("value", ["0", "-2", "two", "257"])
def test_a_bad_number_of_jobs_is_named(value, tmp_path):
    done = cli("--jobs", value, str(tmp_path / "log.jsonl"))
    assert done.returncode == 2
    assert b"--jobs" in done.stderr and value.encode() in done.stderr


def test_a_log_read_through_a_pipe_path_is_read_whole_by_every_job(tmp_path):
    """`/dev/stdin` on a pipe, or a shell's `<(...)`: every job opening the path would share one
    pipe, each reading a part of the log."""
    path = written(tmp_path, mixed_log(runs=60, seed=5))
    one = cli(str(path))
    piped = cli("--jobs", "2", "/dev/stdin", stdin=path.read_bytes())
    assert (piped.returncode, piped.stdout) == (0, one.stdout)
    assert piped.stderr == cli("/dev/stdin", stdin=path.read_bytes()).stderr


def test_a_missing_log_fails_as_in_one_process_before_any_job_starts(tmp_path):
    missing = str(tmp_path / "missing.jsonl")
    one, jobs = cli(missing), cli("--jobs", "3", missing)
    assert jobs.returncode == one.returncode != 0
    assert (
        jobs.stderr.splitlines()
        == one.stderr.splitlines()
        == [f"stallwatch: {missing}: No such file or directory".encode()]
    )


def test_a_replay_stopped_by_sigterm_leaves_no_job_running_and_no_temporary_file(tmp_path):
    """A stopped parent must take its jobs with it: orphaned, they replayed on to the end into
    a temporary folder no one would remove (beside the copy of standard input)."""
    # A replay this size ends in a fraction of a second: the jobs are held (SIGSTOP) so that the
    # parent is stopped while they run; if they had ended already, a larger log is tried.
    for runs in (1500, 6000, 24000):
        folder = tmp_path / f"tmp-{runs}"
        folder.mkdir()
        held = _stop_during_the_jobs(written(tmp_path, mixed_log(runs=runs, seed=9)), folder)
        if held is not None:
            break
    else:
        raise AssertionError("every replay ended before its jobs could be held")
    code, children = held
    assert code != 0
    # An orphan is reaped by init, a moment later.
    wait_until(
        lambda: not [c for c in children if Path(f"/proc/{c}").exists()],
        10,
        f"every job gone: {[_state(child) for child in children]}",
    )
    assert list(folder.iterdir()) == []


def _stop_during_the_jobs(log: Path, folder: Path) -> tuple[int, list[str]] | None:
    """`stallwatch replay --jobs 2 -` given SIGTERM while both its jobs are held: its exit status
    and the jobs' pids, or None when the jobs ended before they could be held."""
    with log.open("rb") as source:
        parent = subprocess.Popen(
            [sys.executable, "-m", "stallwatch.cli.main", "replay", "--jobs", "2", "-"],
            stdin=source,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": str(folder)},
        )
        try:
            children = wait_until(lambda: _children(parent), 60, "both jobs started, or the replay ended")
            _signal(children, signal.SIGSTOP)
            if len(children) < 2 or not all(_stopped(child) for child in children):
                _signal(children, signal.SIGCONT)
                parent.wait(timeout=60)
                return None
            parent.send_signal(signal.SIGTERM)
            # The parent's answer: it terminates a job, whose SIGTERM waits while it is held.
            wait_until(lambda: any(map(_sigterm_pending, children)), 30, "a job told to stop")
            _signal(children, signal.SIGCONT)
            return parent.wait(timeout=30), children
        finally:
            parent.kill()


def _signal(pids: list[str], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signum)


def _children(parent: subprocess.Popen[bytes]) -> list[str] | None:
    """The replay's two jobs once both started; [] when it ended first; None while neither holds."""
    children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
    if len(children) >= 2:
        return children
    return [] if parent.poll() is not None else None


def _sigterm_pending(pid: str) -> bool:
    """Whether a SIGTERM waits for the process (held by SIGSTOP), or it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return True
    masks = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(mask & (1 << (signal.SIGTERM - 1)) for mask in masks)


def _stopped(pid: str, timeout_s: float = 5.0) -> bool:
    """Whether the process stops (a signal lands once it is scheduled); False once it ended."""
    with contextlib.suppress(AssertionError):
        state = wait_until(lambda: _settled(pid), timeout_s, f"job {pid} stopped or ended")
        return state[0] in "Tt"
    return False


def _settled(pid: str) -> str | None:
    """The process's state once it is stopped or ended, else None."""
    state = _state(pid)
    return state if state[0] in "TtZX" or state == "gone" else None


def _state(pid: str) -> str:
    """The process's state letter and name (/proc/PID/stat), or "gone"."""
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return f"{stat[stat.rindex(')') + 2]} {stat[stat.index('(') + 1 : stat.rindex(')')]}"
    return "gone"


class _OneFile(io.RawIOBase):
    """Standard output and error sent to one file (`> all.log 2>&1`): what each buffer flushes,
    in the order flushed."""

    def __init__(self, flushed: list[bytes]) -> None:
        self.flushed = flushed

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.flushed.append(bytes(data))
        return len(data)


def test_output_and_dead_letters_sent_to_one_file_come_out_the_same(tmp_path):
    """Each stream's buffer flushes when a write does not fit, so the two streams interleave in
    one file the same way only if both write the same pieces: a line's commands in one write."""
    path = written(tmp_path, mixed_log(runs=300, seed=2))
    one: list[bytes] = []
    out, err = (io.BufferedWriter(_OneFile(one)) for _ in range(2))
    with path.open("rb") as source:
        replay(source, out, err, "log")
    shared: list[bytes] = []
    out, err = (io.BufferedWriter(_OneFile(shared)) for _ in range(2))
    replay_jobs(str(path), 2, out, err, "log", ReplayEngine())
    assert b"".join(shared) == b"".join(one)
