"""Bytes to a validated event (a plain dict, the engine's input), or a specific error.

The hot path: orjson parses, then a quick check confirms the fields the rules read have the
types the models demand. Only when that check is unsure does pydantic validate the event in
full, which either accepts it or explains exactly what is wrong. The quick check is sound by
construction (it accepts nothing the models reject); tests/contract compare the two.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from stallwatch.contract.events import CONTRACT_VERSION, EVENT_ADAPTER, EVENT_TYPES

# Kafka's default max.message.bytes: a larger event could not have come through the topic,
# and reading one in replay must not let a single line hold the engine's memory hostage.
MAX_EVENT_BYTES = 1_048_576
# orjson's own parse limit; stated here so the error can say it plainly.
MAX_NESTING = 1024

_STATUSES = frozenset(("ok", "error", "overloaded"))
_ROUND_ONLY = frozenset(("round_started", "round_ended"))
_EFFECTS = frozenset(("read", "write", "unknown"))


class InvalidEvent(ValueError):
    """An event that breaks the contract. `reason` is a short label for metrics."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def parse_event(raw: bytes | str, max_bytes: int = MAX_EVENT_BYTES) -> dict[str, Any]:
    """Parse and validate one event; raises InvalidEvent with a message naming what is wrong."""
    if len(raw) > max_bytes:
        raise InvalidEvent("too_large", f"event is {len(raw):,} bytes, over the limit of "
                           f"{max_bytes:,}; send a fingerprint instead of a large result")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc) or "recursion" in str(exc).lower():
            raise InvalidEvent("too_deep", f"event nests deeper than {MAX_NESTING} levels") from None
        raise InvalidEvent("malformed_json", f"not JSON: {exc}") from None
    if type(data) is not dict:
        raise InvalidEvent("not_an_object", f"event must be a JSON object, not {_kind(data)}")
    return validate_event(data)


def validate_event(data: dict[str, Any]) -> dict[str, Any]:
    """Check a parsed event against the models; returns the event as a dict of its fields."""
    version = data.get("v")
    if version != CONTRACT_VERSION or type(version) is not int:
        raise InvalidEvent("unsupported_version",
                           f"unsupported contract version {version!r}; this detector speaks "
                           f"v{CONTRACT_VERSION}")
    kind = data.get("type")
    if type(kind) is not str or kind not in EVENT_TYPES:
        raise InvalidEvent("unknown_type",
                           f"unknown event type {kind!r}; expected one of {', '.join(EVENT_TYPES)}")
    if kind != "run_started" and _conforms(data, kind):
        return data
    try:
        return EVENT_ADAPTER.validate_python(data).model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise InvalidEvent("invalid_field", f"{kind} event: {_describe(exc)}") from None


def _conforms(d: dict[str, Any], kind: str) -> bool:
    """True only when the models would accept the event (run_started excepted: rare and nested,
    it always goes through pydantic)."""
    event_id, run_id, ts = d.get("event_id"), d.get("run_id"), d.get("ts")
    if not (type(event_id) is str and event_id and type(run_id) is str and run_id
            and (type(ts) is float or type(ts) is int)):
        return False
    if kind == "run_ended":
        reason = d.get("reason")
        return reason is None or type(reason) is str
    number = d.get("round")
    if type(number) is not int or number < 0:
        return False
    if kind in _ROUND_ONLY:
        return True
    if type(d.get("call_id")) is not str or type(d.get("tool")) is not str:
        return False
    if kind == "call_proposed":
        effect = d.get("effect")
        return effect is None or (type(effect) is str and effect in _EFFECTS)
    if kind == "call_result":
        status, fingerprint, empty = d.get("status"), d.get("fingerprint"), d.get("empty")
        return ("fact_fingerprints" not in d and type(status) is str and status in _STATUSES
                and (empty is None or type(empty) is bool)
                and (fingerprint is None or (type(fingerprint) is str and empty is not None)))
    return False  # run_started


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False)[:5]:
        where = ".".join(str(p) for p in err["loc"][1:]) or "event"
        parts.append(f"`{where}`: {err['msg']}")
    return "; ".join(parts)


def _kind(value: object) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")
