"""The decision worker's tallies (docs/contract.md): checked, and merged per (key, bucket)."""

from __future__ import annotations

import math
from typing import Any

import orjson

from stallwatch.contract.digests import digest
from stallwatch.contract.limits import MAX_ID_CHARS

# The worker caps its lists at 64 run ids, 16 answers and 16 args; a record far beyond that is
# not from a worker, and merging it would let one record hold any amount of memory.
MAX_LIST_ITEMS = 1_024
# Ids merged into one partial (per list): the judging step caps its sets the same way, so more
# would only be dropped there; counted in `dropped`.
MERGE_RUNS_CAP = 64
MERGE_ANSWERS_CAP = 16
MERGE_ARGS_CAP = 16
# A digest's hex form (stallwatch.contract.digests.digest: 16 bytes).
DIGEST_HEX_CHARS = 32

Tally = dict[str, Any]


class InvalidTally(ValueError):
    """A record on the tallies topic that is not a tally; the message says what is wrong."""


def tally_key(tenant: str | None, tool: str) -> bytes:
    """The record key of a (tenant, tool): UTF-8 `tenant + "\\x1f" + tool`, tenant "" when null."""
    return f"{tenant or ''}\x1f{tool}".encode("utf-8", "surrogatepass")


def _ids(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS:
        raise InvalidTally(f"`{name}` must be a list of at most {MAX_LIST_ITEMS} strings")
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_ID_CHARS for v in value):
        raise InvalidTally(f"`{name}` must hold non-empty strings of at most {MAX_ID_CHARS} characters")
    return value


def _digests(value: list[str]) -> list[str]:
    """Result fingerprints and argument digests: 32 hex digits as the workers write them; any
    other id is fingerprinted to that form, so one digest holds 81 bytes in a key, not up to 177
    (a key at its caps holds about 2,800 of them)."""
    return [v if _is_digest(v) else digest(v.encode("utf-8", "surrogatepass")).hex() for v in value]


def _is_digest(value: str) -> bool:
    if len(value) != DIGEST_HEX_CHARS:
        return False
    try:
        bytes.fromhex(value)
    except ValueError:
        return False
    return True


def _shown(value: Any) -> str:
    """A bad value for an error that lands in a dead letter: a number as it is, anything else by
    its type only (a string's text may be anything)."""
    return repr(value) if value is None or isinstance(value, int | float) else f"a {type(value).__name__}"


def _count(record: dict[str, Any], name: str) -> int:
    value = record.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidTally(f"`{name}` must be an integer >= 0, got {_shown(value)}")
    return value


def parse_tally(raw: bytes | None, key: bytes | None) -> Tally:
    """Check one record; raise InvalidTally naming what is wrong."""
    if raw is None:
        raise InvalidTally("empty record (a tombstone) on the tallies topic")
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise InvalidTally(f"not JSON: {error}") from None
    if not isinstance(record, dict) or record.get("v") != 1:
        raise InvalidTally('a tally is a JSON object with "v": 1')
    tool, tenant, ts = record.get("tool"), record.get("tenant"), record.get("ts")
    if not isinstance(tool, str) or not 0 < len(tool) <= MAX_ID_CHARS:
        raise InvalidTally(f"`tool` must be a string of 1 to {MAX_ID_CHARS} characters")
    if tenant is not None and (not isinstance(tenant, str) or len(tenant) > MAX_ID_CHARS):
        raise InvalidTally(f"`tenant` must be null or a string of at most {MAX_ID_CHARS} characters")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or ts < 0:
        raise InvalidTally(f"`ts` must be a finite number of seconds >= 0, got {_shown(ts)}")
    if key is not None and key != tally_key(tenant, tool):
        raise InvalidTally('the record key is not tenant + "\\x1f" + tool of its value')
    calls, failures = _count(record, "calls"), _count(record, "failures")
    if failures > calls:
        raise InvalidTally(f"`failures` ({failures}) is more than `calls` ({calls})")
    answers = record.get("answers", [])
    if not isinstance(answers, list) or len(answers) > MAX_LIST_ITEMS:
        raise InvalidTally(f"`answers` must be a list of at most {MAX_LIST_ITEMS} objects")
    checked = []
    for answer in answers:
        fingerprint = answer.get("fingerprint") if isinstance(answer, dict) else None
        if not isinstance(fingerprint, str) or not 0 < len(fingerprint) <= MAX_ID_CHARS:
            raise InvalidTally("each answer needs a `fingerprint` string")
        checked.append(
            {
                "fingerprint": _digests([fingerprint])[0],
                "runs": _ids(answer.get("runs", []), "answers.runs"),
                "args": _digests(_ids(answer.get("args", []), "answers.args")),
            }
        )
    return {
        "tenant": tenant,
        "tool": tool,
        "ts": float(ts),
        "calls": calls,
        "failures": failures,
        "runs": _ids(record.get("runs", []), "runs"),
        "stops": _ids(record.get("stops", []), "stops"),
        "answers": checked,
        "dropped": _count(record, "dropped"),
    }


def add_capped(into: list[str], values: list[str], cap: int) -> int:
    """Add the values not yet in `into`, up to `cap` items; return how many were left out."""
    dropped = 0
    for value in values:
        if value in into:
            continue
        if len(into) >= cap:
            dropped += 1
        else:
            into.append(value)
    return dropped


def new_partial(tenant: str | None, tool: str, ts: float) -> Tally:
    return {
        "v": 1,
        "tenant": tenant,
        "tool": tool,
        "ts": ts,
        "calls": 0,
        "failures": 0,
        "runs": [],
        "stops": [],
        "answers": [],
        "dropped": 0,
    }


def merge(into: Tally, tally: Tally) -> None:
    """Fold one tally into a partial of the same (tenant, tool) and bucket, within the caps."""
    into["ts"] = max(into["ts"], tally["ts"])
    into["calls"] += tally["calls"]
    into["failures"] += tally["failures"]
    dropped = tally["dropped"]
    dropped += add_capped(into["runs"], tally["runs"], MERGE_RUNS_CAP)
    dropped += add_capped(into["stops"], tally["stops"], MERGE_RUNS_CAP)
    answers = {a["fingerprint"]: a for a in into["answers"]}
    for answer in tally["answers"]:
        held = answers.get(answer["fingerprint"])
        if held is None:
            if len(answers) >= MERGE_ANSWERS_CAP:
                dropped += 1
                continue
            held = {"fingerprint": answer["fingerprint"], "runs": [], "args": []}
            answers[answer["fingerprint"]] = held
            into["answers"].append(held)
        dropped += add_capped(held["runs"], answer["runs"], MERGE_RUNS_CAP)
        dropped += add_capped(held["args"], answer["args"], MERGE_ARGS_CAP)
    into["dropped"] += dropped
