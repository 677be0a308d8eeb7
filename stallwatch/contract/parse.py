"""Bytes to a validated event, or a specific error that becomes a dead letter."""

from __future__ import annotations

import orjson
from pydantic import ValidationError

from stallwatch.contract.events import CONTRACT_VERSION, EVENT_ADAPTER, EVENT_TYPES, Event

# Kafka's default max.message.bytes: a larger event could not have come through the topic,
# and reading one in replay must not let a single line hold the engine's memory hostage.
MAX_EVENT_BYTES = 1_048_576
# orjson's own parse limit; stated here so the error can say it plainly.
MAX_NESTING = 1024


class InvalidEvent(ValueError):
    """An event that breaks the contract. `reason` is a short label for metrics."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def parse_event(raw: bytes | str, max_bytes: int = MAX_EVENT_BYTES) -> Event:
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
    if not isinstance(data, dict):
        raise InvalidEvent("not_an_object", f"event must be a JSON object, not {_kind(data)}")
    version = data.get("v")
    if version != CONTRACT_VERSION or type(version) is not int:
        raise InvalidEvent("unsupported_version",
                           f"unsupported contract version {version!r}; this detector speaks "
                           f"v{CONTRACT_VERSION}")
    kind = data.get("type")
    if kind not in EVENT_TYPES:
        raise InvalidEvent("unknown_type",
                           f"unknown event type {kind!r}; expected one of {', '.join(EVENT_TYPES)}")
    try:
        return EVENT_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise InvalidEvent("invalid_field", f"{kind} event: {_describe(exc)}") from None


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False)[:5]:
        where = ".".join(str(p) for p in err["loc"][1:]) or "event"
        parts.append(f"`{where}`: {err['msg']}")
    return "; ".join(parts)


def _kind(value: object) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")
