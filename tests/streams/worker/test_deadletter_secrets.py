"""Dead letters carry no secret: a bad event with an API key in a result, or in the bad field
itself, leaves none of it in the worker's batch step's letters or in `stallwatch replay`'s
standard error; the raw input only with STALLWATCH_DEADLETTER_RAW."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from stallwatch.contract.digests import digest
from stallwatch.contract.envelope import envelope
from stallwatch.engine.canonical import derive_secret
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage

SECRET = "sk-live-7Qx9Vb2Lm4Np8Rt6Wz3Yk5"
FLEET_KEY = "a fleet key of at least 16 characters"


def poison() -> list[tuple[str, bytes]]:
    """(what is wrong, the record's value), each an event of run `r` holding SECRET."""
    result = envelope(
        "call_result",
        "r",
        "e1",
        1.0,
        round="one",
        call_id="c",
        tool="search",
        status="ok",
        result={"headers": {"Authorization": f"Bearer {SECRET}"}},
    )
    return [
        ("a secret in the result, a bad round", orjson.dumps(result)),
        ("a secret as the event type", orjson.dumps(envelope(SECRET, "r", "e2", 1.0))),
        (
            "a secret as the version",
            orjson.dumps({**envelope("round_started", "r", "e3", 1.0, round=1), "v": SECRET}),
        ),
        (
            "a secret as the status",
            orjson.dumps(
                envelope("call_result", "r", "e4", 1.0, round=1, call_id="c", tool="t", status=SECRET)
            ),
        ),
        ("a secret as the round", orjson.dumps(envelope("round_started", "r", "e5", 1.0, round=SECRET))),
        (
            "a secret in broken JSON",
            b'{"v": 1, "type": "call_result", "result": "' + SECRET.encode() + b'" oops}',
        ),
        ("a secret in a list", orjson.dumps([SECRET])),
    ]


def pieces(text: str, size: int = 6) -> list[str]:
    """Every part of `text` long enough to mean something: what must not appear anywhere."""
    return [text[i : i + size] for i in range(len(text) - size + 1)]


def leaked(data: bytes) -> list[str]:
    text = data.decode("utf-8", "replace")
    return [part for part in pieces(SECRET) if part in text]


def batch_letters(deadletter_raw: bool = False) -> list[dict]:
    cases = poison()
    batch = [SourceMessage(b"r", value, 2, 40 + i) for i, (_, value) in enumerate(cases)]
    result = BatchApplier(
        Detector(secret=derive_secret(FLEET_KEY)), "stallwatch.events", deadletter_raw=deadletter_raw
    ).apply(batch, lambda run_id: None, PartitionClock(), 0.0)
    assert len(result.letters) == len(cases)
    for _, letter, reason in result.letters:
        assert not leaked(letter), (reason, leaked(letter))
    return [orjson.loads(letter) for _, letter, _ in result.letters]


def test_the_batch_steps_dead_letters_hold_no_part_of_a_secret():
    letters = batch_letters()
    for i, ((_, value), letter) in enumerate(zip(poison(), letters, strict=True)):
        assert letter["raw"] == "" and not letter["raw_kept"] and not letter["raw_truncated"]
        # What an operator matches the letter with the record by, and finds it with.
        assert letter["raw_size"] == len(value)
        assert letter["raw_digest"] == digest(value, derive_secret(FLEET_KEY)).hex()
        assert (letter["topic"], letter["partition"], letter["offset"]) == ("stallwatch.events", 2, 40 + i)
        assert letter["error"]
    errors = " ".join(letter["error"] for letter in letters)
    assert "unknown event type (a string of" in errors
    assert "`round`" in errors


def test_the_raw_input_is_kept_only_when_asked_for():
    """The leak check above can fail: with the setting on, the secret is in `raw`."""
    cases = poison()
    batch = [SourceMessage(b"r", value, 2, 40 + i) for i, (_, value) in enumerate(cases)]
    result = BatchApplier(
        Detector(secret=derive_secret(FLEET_KEY)), "stallwatch.events", deadletter_raw=True
    ).apply(batch, lambda run_id: None, PartitionClock(), 0.0)
    kept = [orjson.loads(letter) for _, letter, _ in result.letters]
    assert len(kept) == len(cases) and all(letter["raw_kept"] for letter in kept)
    assert leaked(kept[0]["raw"].encode())


def replay_stderr(log: bytes, **env: str) -> bytes:
    done = subprocess.run(
        [sys.executable, "-m", "stallwatch.cli.main", "replay", "-"],
        input=log,
        capture_output=True,
        timeout=120,
        check=True,
        env={**os.environ, **env},
    )
    return done.stderr


def test_replays_dead_letters_hold_no_part_of_a_secret():
    log = b"\n".join(value for _, value in poison()) + b"\n"
    err = replay_stderr(log)
    letters = [orjson.loads(line) for line in err.splitlines()]
    assert len(letters) == len(poison())
    assert not leaked(err), leaked(err)
    assert all(letter["raw"] == "" and letter["raw_size"] > 0 for letter in letters)
    kept = replay_stderr(log, STALLWATCH_DEADLETTER_RAW="true")
    assert leaked(kept)
