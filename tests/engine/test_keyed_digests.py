"""Keyed digests: unkeyed they are XXH3-128 as before; keyed, a small value cannot be guessed."""

from __future__ import annotations

from hashlib import blake2b

import orjson
from xxhash import xxh3_128_digest, xxh3_128_hexdigest

from stallwatch.contract.limits import DEADLETTER_RAW_BYTES, bounded_id
from stallwatch.engine.canonical import (
    call_signature,
    canonical_bytes,
    derive_secret,
    fact_digest,
    fact_fingerprints,
    fingerprint,
)
from stallwatch.engine.embedded import EmbeddedEngine, Rejected
from tests.script import RunScript

SECRET = derive_secret("a shared secret of the fleet, 32+")
PIN = {"pin": "4821"}


def dictionary(secret: bytes | None) -> dict[str, str]:
    """What an attacker who reads the events topic builds: every 4-digit pin's fingerprint."""
    return {fingerprint({"pin": f"{n:04}"}, secret)[0]: f"{n:04}" for n in range(10_000)}


def test_without_a_key_digests_are_xxh3_as_before_and_a_pin_is_reversed():
    assert fingerprint(PIN)[0] == xxh3_128_digest(canonical_bytes(PIN)).hex()
    assert dictionary(None)[fingerprint(PIN)[0]] == "4821"  # the risk of running without a key


def test_with_a_key_the_same_dictionary_finds_nothing():
    keyed = fingerprint(PIN, SECRET)[0]
    assert keyed not in dictionary(None)
    assert keyed not in dictionary(derive_secret("another secret of 32 characters!"))
    assert dictionary(SECRET)[keyed] == "4821"  # only a holder of the key can guess


def test_every_digest_takes_the_key_and_stays_comparable():
    for make in (
        lambda s: call_signature("search", {"q": 1}, s),
        lambda s: fact_digest(PIN, s),
        lambda s: bytes.fromhex(fact_fingerprints("t", {"items": [{"id": 1}]}, "items", "id", secret=s)[0]),
    ):
        assert make(SECRET) == make(SECRET) != make(None)
        assert len(make(SECRET)) == 16
    assert call_signature("search", {"q": 1}, SECRET) != call_signature("search", {"q": 2}, SECRET)


def test_the_key_changes_no_decision():
    s = RunScript(mode="chat", tools=[{"name": "poll"}], policy={"cycle_threshold": 2})
    researcher = RunScript("r2", tools=[{"name": "search", "facts": {"path": "items", "key": "id"}}])
    s.start_round()
    for i in range(8):
        s.call("poll" if i % 2 else "get", {"n": i % 2}, status="ok", result={"same": True})
    for i in range(8):
        researcher.round_of(("search", {"q": i}, {"items": [{"id": i % 2}]}))
    lines = s.lines() + researcher.lines()

    def commands(secret):
        return [orjson.dumps(c) for out in EmbeddedEngine(secret=secret).replay(lines) for c in out]

    assert commands(SECRET) == commands(None) and any(b'"stop"' in c for c in commands(None))


def test_the_keyed_digest_is_the_documented_construction():
    """What docs/contract.md tells runtimes in other languages to compute."""
    key = blake2b(b"a shared secret of the fleet, 32+", digest_size=32, person=b"stallwatch-fp").digest()
    assert key == SECRET
    content = canonical_bytes(PIN)
    assert (
        fingerprint(PIN, SECRET)[0] == blake2b(xxh3_128_digest(content), key=key, digest_size=16).hexdigest()
    )


# An event the parser refuses (an unknown type), larger than a dead letter keeps, with a pin
# past the cut: `raw` shows the start, `raw_size` the length, `raw_digest` the whole.
def poison_with_a_pin(pin: str) -> bytes:
    return (
        b'{"v": 1, "type": "bogus", "pad": "'
        + b"x" * DEADLETTER_RAW_BYTES
        + b'", "pin": "'
        + pin.encode()
        + b'"}'
    )


def guessed_pin(raw_digest: str) -> str | None:
    """What a reader of the dead-letter topic recovers by hashing every guess of the whole."""
    for n in range(10_000):
        if xxh3_128_hexdigest(poison_with_a_pin(f"{n:04}")) == raw_digest:
            return f"{n:04}"
    return None


def test_a_pin_past_a_dead_letters_cut_is_not_recovered_with_the_key_set():
    unkeyed = EmbeddedEngine(deadletter_raw=True).handle_raw(poison_with_a_pin("4821"))
    keyed = EmbeddedEngine(secret=SECRET, deadletter_raw=True).handle_raw(poison_with_a_pin("4821"))
    assert isinstance(unkeyed, Rejected) and isinstance(keyed, Rejected)
    assert keyed.letter.raw_truncated and "4821" not in keyed.letter.raw
    assert guessed_pin(unkeyed.letter.raw_digest) == "4821"  # the risk of running without a key
    assert guessed_pin(keyed.letter.raw_digest) is None
    # Still the same input's digest for whoever holds the key, to match a letter with its record.
    assert (
        keyed.letter.raw_digest
        == EmbeddedEngine(secret=SECRET).handle_raw(poison_with_a_pin("4821")).letter.raw_digest
        != EmbeddedEngine(secret=SECRET).handle_raw(poison_with_a_pin("4822")).letter.raw_digest
    )


def test_the_digest_of_a_long_id_is_keyed_in_commands_and_in_the_client():
    call_id = "c" * 120 + "-token-4821"
    s = RunScript()
    s.start_round()
    s.add("call_proposed", round=1, call_id=call_id, tool="search", args={"q": 1})
    verdict = next(c for out in EmbeddedEngine(secret=SECRET).replay(s.lines()) for c in out)
    shown = verdict.call_id
    assert shown == bounded_id(call_id, SECRET) != bounded_id(call_id)  # the client maps it alike
    guesses = {bounded_id("c" * 120 + f"-token-{n:04}") for n in range(10_000)}
    assert bounded_id(call_id) in guesses and shown not in guesses
