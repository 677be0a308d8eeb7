"""A (tenant, tool) key's bytes in memory, estimated as its state changes: what a tenant's keys
hold on a fleet worker, so that its budget (STALLWATCH_FLEET_MAX_BYTES_PER_TENANT) is in bytes.

A key's estimate is its own fixed part, its buckets' bytes and its open incidents'. The buckets'
part is kept incrementally: `window.add` returns what the ids it appended cost (each string's
exact size, `sys.getsizeof`, and its list slot) and what the buckets it dropped held, so a
partial costs the ids it brings, never a walk of the key's state. Incidents are at most one per
kind, so their part is counted whole at each step.

The constants are measured with tracemalloc on CPython 3.12 (`benchmarks/fleet_key_bytes.py`
prints the estimate beside the measured bytes for a key at its caps).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from sys import getsizeof
from typing import Any

from stallwatch.contract.limits import MAX_ID_CHARS

# A list's slot for one id, with CPython's over-allocation (about 1/8 more).
ITEM_BYTES = 10
# A new bucket: its dict, its three lists, its answers dict, its index as a string key.
BUCKET_BYTES = 540
# A new answer in a bucket: its dict, its two lists, its slot in the bucket's answers dict (the
# fingerprint's own string is counted apart, at its size).
ANSWER_BYTES = 330
# An open incident: its dict, its id, its evidence dict; each run it advised counts as an id of
# the longest kind (the list is bounded by STALLWATCH_FLEET_MAX_ADVISED_RUNS).
INCIDENT_BYTES = 1_100
ADVISED_BYTES = ITEM_BYTES + getsizeof("x" * MAX_ID_CHARS)
# A key's own: its state dict and empty collections, its closed-incidents entries, its entries in
# the table's store and the task's indexes (the key's own bytes are counted apart, at their size).
KEY_BYTES = 1_000


def ids_bytes(ids: Iterable[str]) -> int:
    """What a run of ids costs in a list: each string and its slot."""
    total = count = 0
    for value in ids:
        total += getsizeof(value)
        count += 1
    return total + ITEM_BYTES * count


def bucket_bytes(bucket: Mapping[str, Any]) -> int:
    """One bucket's bytes, counted whole (when it is dropped, or a key is read from the table)."""
    total = BUCKET_BYTES + ids_bytes(bucket["runs"]) + ids_bytes(bucket["stops"])
    for fingerprint, answer in bucket["answers"].items():
        total += ANSWER_BYTES + getsizeof(fingerprint) + ids_bytes(answer["runs"]) + ids_bytes(answer["args"])
    return total


def buckets_bytes(state: Mapping[str, Any]) -> int:
    """Every bucket of a key, counted whole: once per key read from the table."""
    return sum(bucket_bytes(bucket) for bucket in state["buckets"].values())


def incidents_bytes(state: Mapping[str, Any]) -> int:
    """The key's open incidents (one per kind at most)."""
    return sum(INCIDENT_BYTES + ADVISED_BYTES * len(i["advised"]) for i in state["open"].values())


def key_bytes(key: bytes, state: Mapping[str, Any], buckets: int) -> int:
    """The key's estimate, given its buckets' bytes as kept."""
    return (
        KEY_BYTES
        + getsizeof(key)
        + getsizeof(state["tool"])
        + getsizeof(state["tenant"])
        + buckets
        + incidents_bytes(state)
    )
