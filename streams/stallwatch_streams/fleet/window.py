"""One (tenant, tool)'s recent buckets of event time, and the hopping windows summed from them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from sys import getsizeof
from typing import Any

from stallwatch_streams.fleet import sizes
from stallwatch_streams.fleet.tally import Tally, add_capped

# Sets one bucket keeps (distinct runs, stopped runs, fingerprints, runs and args per
# fingerprint): the thresholds are a handful, so these leave wide margin for the evidence while
# bounding a key's memory whatever a flood of runs does. What they leave out is counted.
BUCKET_RUNS_CAP = 64
BUCKET_ANSWERS_CAP = 16
ANSWER_IDS_CAP = 16
# Buckets older than the newest by more than this many windows are dropped: late data for them
# could no longer change a window that decides anything.
LATE_WINDOWS = 1

State = dict[str, Any]

# The table value's format, stored as its "format" key; a value without one is format 1. Bumped
# only as docs/operations.md ("Upgrading and rolling back") says: a release writes a format once
# the release before it reads it. A key added alongside the others is no new format: a reader
# ignores the keys it does not know.
WINDOW_FORMAT = 1


def readable(state: object) -> bool:
    """A table value this version reads: another format's is dropped, its windows counted again
    from the next partials (the fleet's judgements are advisory; a window rebuilds in minutes)."""
    return isinstance(state, dict) and state.get("format", 1) == WINDOW_FORMAT and "buckets" in state


def new_state(tenant: str | None, tool: str) -> State:
    """JSON-shaped (it is the table value, written to the changelog as JSON)."""
    return {
        "format": WINDOW_FORMAT,
        "tenant": tenant,
        "tool": tool,
        "newest": -1,
        "buckets": {},
        "open": {},
        "closed": {},
        "dropped": 0,
        "late": 0,
    }


def bucket_of(ts: float, step_s: float) -> int:
    return math.floor(ts / step_s)


def add(state: State, partial: Tally, step_s: float, width: int) -> tuple[int | None, int]:
    """Fold a partial into its bucket; return the bucket index (None when it came too late) and
    the estimated bytes the key's buckets grew by (less what the buckets it dropped held)."""
    index = bucket_of(partial["ts"], step_s)
    if index < state["newest"] - width * (1 + LATE_WINDOWS):
        state["late"] += 1
        return None, 0
    state["newest"] = max(state["newest"], index)
    bucket = state["buckets"].get(str(index))
    grown = 0
    if bucket is None:
        bucket = state["buckets"][str(index)] = {
            "calls": 0,
            "failures": 0,
            "runs": [],
            "stops": [],
            "answers": {},
        }
        grown += sizes.BUCKET_BYTES
    bucket["calls"] += partial["calls"]
    bucket["failures"] += partial["failures"]
    dropped = partial["dropped"]
    dropped, added = _add_ids(bucket["runs"], partial["runs"], BUCKET_RUNS_CAP, dropped)
    grown += added
    dropped, added = _add_ids(bucket["stops"], partial["stops"], BUCKET_RUNS_CAP, dropped)
    grown += added
    for answer in partial["answers"]:
        held = bucket["answers"].get(answer["fingerprint"])
        if held is None:
            if len(bucket["answers"]) >= BUCKET_ANSWERS_CAP:
                dropped += 1
                continue
            held = bucket["answers"][answer["fingerprint"]] = {"runs": [], "args": []}
            grown += sizes.ANSWER_BYTES + getsizeof(answer["fingerprint"])
        dropped, added = _add_ids(held["runs"], answer["runs"], ANSWER_IDS_CAP, dropped)
        grown += added
        dropped, added = _add_ids(held["args"], answer["args"], ANSWER_IDS_CAP, dropped)
        grown += added
    state["dropped"] += dropped
    oldest = state["newest"] - width * (1 + LATE_WINDOWS)
    for stale in [k for k in state["buckets"] if int(k) < oldest]:
        grown -= sizes.bucket_bytes(state["buckets"].pop(stale))
    return index, grown


def _add_ids(into: list[str], values: list[str], cap: int, dropped: int) -> tuple[int, int]:
    """`add_capped`, with the count left out added to `dropped` and the bytes of what went in."""
    before = len(into)
    dropped += add_capped(into, values, cap)
    return dropped, sizes.ids_bytes(into[before:])


@dataclass(frozen=True, slots=True)
class Window:
    """The sums of one hopping window: buckets first .. first + width - 1."""

    first: int
    calls: int
    failures: int
    runs: frozenset[str]
    stops: frozenset[str]
    # The fingerprint that answered the most runs: (runs, distinct args) of it.
    answer_runs: int
    answer_args: int


def window(state: State, first: int, width: int, min_args: int) -> Window:
    """Sum the window's buckets. The answer reported is the one answering most runs among those
    with at least `min_args` distinct argument digests (else the one answering most runs)."""
    calls = failures = 0
    runs: set[str] = set()
    stops: set[str] = set()
    answers: dict[str, tuple[set[str], set[str]]] = {}
    for index in range(first, first + width):
        bucket = state["buckets"].get(str(index))
        if bucket is None:
            continue
        calls += bucket["calls"]
        failures += bucket["failures"]
        runs.update(bucket["runs"])
        stops.update(bucket["stops"])
        for fingerprint, held in bucket["answers"].items():
            answer_runs, answer_args = answers.setdefault(fingerprint, (set(), set()))
            answer_runs.update(held["runs"])
            answer_args.update(held["args"])
    ranked = sorted(((len(a) >= min_args, len(r), len(a)) for r, a in answers.values()), reverse=True)
    best = ranked[0] if ranked else (False, 0, 0)
    return Window(first, calls, failures, frozenset(runs), frozenset(stops), best[1], best[2])


def stopped_runs(state: State) -> set[str]:
    """Every run seen stopped naming this tool in the buckets still held."""
    return {run for bucket in state["buckets"].values() for run in bucket["stops"]}
