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

from stallwatch.contract.advisories import verified
from stallwatch.contract.events import CONTRACT_VERSION, EVENT_ADAPTER, EVENT_TYPES, STATUSES, RawEvent
from stallwatch.contract.limits import MAX_DECLARATIONS_BYTES, MAX_ID_CHARS, bounded_id
from stallwatch.contract.policy import MODES

# Kafka's default max.message.bytes: a larger event could not have come through the topic,
# and reading one in replay must not let a single line hold the engine's memory hostage.
MAX_EVENT_BYTES = 1_048_576
# orjson's own parse limit; stated here so the error can say it plainly.
MAX_NESTING = 1024

_ROUND_ONLY = frozenset(("round_started", "round_ended"))
# Fields copied from an event into commands and states: bounded by MAX_ID_CHARS.
_IDS = ("event_id", "run_id", "call_id", "tool")
_EFFECTS = frozenset(("read", "write", "unknown"))
_TYPES = frozenset(EVENT_TYPES)
# The kinds the quick check knows; the others are rare and nested, validated in full.
_QUICK_TYPES = frozenset(("round_started", "round_ended", "call_proposed", "call_result", "run_ended"))
# A run_started in its common shape (these fields only, no policy, tools declaring names and
# flags only) is checked here too: pydantic took ~40 µs for each, so a fleet log's 2% of
# run_started cost as much as parsing every one of its lines.
_PLAIN_RUN_STARTED = frozenset(
    ("v", "type", "event_id", "run_id", "ts", "mode", "tools", "parent_run_id", "tenant")
)
_PLAIN_TOOL = frozenset(("name", "repeat_exempt", "requires_approval"))
_MODES = frozenset(MODES)


class InvalidEvent(ValueError):
    """An event that breaks the contract. `reason` is a short label for metrics."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def parse_record(
    key: bytes | None,
    value: bytes | str | None,
    max_bytes: int = MAX_EVENT_BYTES,
    secret: bytes | None = None,
    advisory_key: bytes | None = None,
) -> RawEvent:
    """A Kafka record of the events topic to a validated event: as `parse_event`, and its key
    must be the event's run_id (the run's state is partitioned by it)."""
    if key is None:
        raise InvalidEvent("null_key", "the record has no key; key every event by its run_id")
    event = parse_event(value, max_bytes, secret, advisory_key)
    if key != event["run_id"].encode():
        raise InvalidEvent(
            "key_mismatch",
            f"message key ({len(key):,} bytes) is not the event's "
            f"run_id ({len(event['run_id']):,} characters); key events by run_id",
        )
    return event


def parse_event(
    raw: bytes | str | None,
    max_bytes: int = MAX_EVENT_BYTES,
    secret: bytes | None = None,
    advisory_key: bytes | None = None,
) -> RawEvent:
    """Parse and validate one event; raises InvalidEvent with a message naming what is wrong.
    `secret`: the fleet's fingerprint key, which keys the digest of an id too long to copy.
    `advisory_key`: with it, a fleet_advisory must carry the fleet app's MAC
    (stallwatch/contract/advisories.py); None accepts every advisory (one team's deployment)."""
    if raw is None:
        raise InvalidEvent(
            "null_value",
            "the record's value is null (a tombstone); the events topic takes events, never deletions",
        )
    if len(raw) > max_bytes:
        raise InvalidEvent(
            "too_large",
            f"event is {len(raw):,} bytes, over the limit of "
            f"{max_bytes:,}; send a fingerprint instead of a large result",
        )
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc) or "recursion" in str(exc).lower():
            raise InvalidEvent("too_deep", f"event nests deeper than {MAX_NESTING} levels") from None
        raise InvalidEvent("malformed_json", f"not JSON: {exc}") from None
    if type(data) is not dict:
        raise InvalidEvent("not_an_object", f"event must be a JSON object, not {_kind(data)}")
    kind, version = data.get("type"), data.get("v")
    if (
        type(version) is int
        and version == CONTRACT_VERSION
        and type(kind) is str
        and kind in _QUICK_TYPES
        and _conforms(data, kind)
    ):
        return data  # the common case, without a call more (validate_event decides the rest)
    if advisory_key is not None and kind == "fleet_advisory" and not verified(data, advisory_key):
        raise InvalidEvent(
            "unsigned_advisory",
            "a fleet_advisory without the fleet app's MAC: "
            "only the fleet app, holding STALLWATCH_ADVISORY_KEY, advises a run",
        )
    return validate_event(data, secret)


def validate_event(data: dict[str, Any], secret: bytes | None = None) -> RawEvent:
    """Check a parsed event against the models; returns the event as a dict of its fields.
    `secret` keys the digest of an id too long to copy (`parse_event`)."""
    version = data.get("v")
    if version != CONTRACT_VERSION or type(version) is not int:
        raise InvalidEvent(
            "unsupported_version",
            f"unsupported contract version {_described(version)}; this detector speaks v{CONTRACT_VERSION}",
        )
    kind = data.get("type")
    if type(kind) is not str or kind not in _TYPES:
        raise InvalidEvent(
            "unknown_type", f"unknown event type {_described(kind)}; expected one of {', '.join(EVENT_TYPES)}"
        )
    if kind in _QUICK_TYPES:
        if _conforms(data, kind):
            return data  # the quick check also confirmed that every id is short enough to copy
    elif kind == "run_started" and _plain_run_started(data):
        return data
    try:
        event = EVENT_ADAPTER.validate_python(data).model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise InvalidEvent("invalid_field", f"{kind} event: {_describe(exc)}") from None
    if kind == "run_started":
        event = _declared(event, secret)
    return _bounded(event, secret)


def _bounded(event: dict[str, Any], secret: bytes | None) -> dict[str, Any]:
    """An event whose ids fit in a command: a run_id too long is refused (it is also the record
    key commands are routed by); a long event_id, call_id or tool becomes a marked digest (the
    client maps its call ids the same way), so the call still gets its verdict."""
    if not any(len(event.get(name) or "") > MAX_ID_CHARS for name in _IDS):
        return event
    if len(event["run_id"]) > MAX_ID_CHARS:
        raise InvalidEvent(
            "id_too_long", f"run_id is {len(event['run_id']):,} characters, over the limit of {MAX_ID_CHARS}"
        )
    event = dict(event)
    for name in ("event_id", "call_id", "tool"):
        if name in event:
            event[name] = bounded_id(event[name], secret)
    return event


def _declared(event: dict[str, Any], secret: bytes | None) -> dict[str, Any]:
    """A run's declarations are kept in its state for the whole run: they must stay small. A
    declared name over MAX_ID_CHARS becomes the marked digest a call's `tool` becomes, so the
    declaration still matches its calls."""
    tools = event.get("tools") or []
    if any(len(t["name"]) > MAX_ID_CHARS for t in tools):
        tools = [t | {"name": bounded_id(t["name"], secret)} for t in tools]
        event = event | {"tools": tools}
    size = len(orjson.dumps(tools))
    if size > MAX_DECLARATIONS_BYTES:
        raise InvalidEvent(
            "declarations_too_large",
            f"the run's tool declarations take {size:,} "
            f"bytes, over the limit of {MAX_DECLARATIONS_BYTES:,}; declare fewer "
            "tools or shorter volatile fields",
        )
    return event


def _conforms(d: dict[str, Any], kind: str) -> bool:
    """True only when the models would accept the event (run_started and fleet_advisory
    excepted: rare and nested, they always go through pydantic) and none of its ids is too long
    to copy as is. Required fields are read by subscript (a missing one fails the check), the
    cheapest read there is on this path."""
    try:
        event_id, run_id, ts = d["event_id"], d["run_id"], d["ts"]
        if not (
            type(event_id) is str
            and 0 < len(event_id) <= MAX_ID_CHARS
            and type(run_id) is str
            and 0 < len(run_id) <= MAX_ID_CHARS
            and (type(ts) is float or type(ts) is int)
        ):
            return False
        if kind == "run_ended":
            reason = d.get("reason")
            return reason is None or type(reason) is str
        number = d["round"]
        if type(number) is not int or number < 0:
            return False
        if kind in _ROUND_ONLY:
            return True
        call_id, tool = d["call_id"], d["tool"]
        if not (
            type(call_id) is str
            and len(call_id) <= MAX_ID_CHARS
            and type(tool) is str
            and len(tool) <= MAX_ID_CHARS
        ):
            return False
        if kind == "call_result":
            status, fingerprint, empty = d["status"], d.get("fingerprint"), d.get("empty")
            return (
                "fact_fingerprints" not in d
                and type(status) is str
                and status in STATUSES
                and (empty is None or type(empty) is bool)
                and (fingerprint is None or (type(fingerprint) is str and empty is not None))
            )
        if kind == "call_proposed":
            args_digest, effect = d.get("args_digest"), d.get("effect")
            return (args_digest is None or type(args_digest) is str) and (
                effect is None or (type(effect) is str and effect in _EFFECTS)
            )
    except KeyError:
        return False
    return False  # run_started and fleet_advisory: rare, validated in full


def _plain_run_started(d: dict[str, Any]) -> bool:
    """True only for a run_started that the models accept and dump exactly as it stands:
    known fields only, `ts` a float already, no policy, each tool a name and its two flags;
    its ids, tenant and tool names short enough, its declarations small enough."""
    if not d.keys() <= _PLAIN_RUN_STARTED:
        return False
    event_id, run_id, ts, mode = d.get("event_id"), d.get("run_id"), d.get("ts"), d.get("mode")
    if not (
        type(event_id) is str
        and 0 < len(event_id) <= MAX_ID_CHARS
        and type(run_id) is str
        and 0 < len(run_id) <= MAX_ID_CHARS
        and type(ts) is float
        and type(mode) is str
        and mode in _MODES
    ):
        return False
    parent, tenant = d.get("parent_run_id"), d.get("tenant")
    if not (
        (parent is None or type(parent) is str)
        and (tenant is None or (type(tenant) is str and len(tenant) <= MAX_ID_CHARS))
    ):
        return False
    if "tools" not in d:
        return True
    tools = d["tools"]
    if type(tools) is not list:
        return False
    for tool in tools:
        if type(tool) is not dict or not tool.keys() <= _PLAIN_TOOL:
            return False
        name = tool.get("name")
        if (
            type(name) is not str
            or len(name) > MAX_ID_CHARS
            or type(tool.get("repeat_exempt", False)) is not bool
            or type(tool.get("requires_approval", False)) is not bool
        ):
            return False
    return len(orjson.dumps(tools)) <= MAX_DECLARATIONS_BYTES


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False)[:5]:
        where = ".".join(str(p) for p in err["loc"][1:]) or "event"
        parts.append(f"`{where}`: {err['msg']}")
    return "; ".join(parts)


# A number in an error message is written out up to this many characters.
_NUMBER_CHARS = 20


def _described(value: object) -> str:
    """A value from the input, for an error message that lands in a dead letter and the logs:
    its type and size, never its text (a string where a type or version belongs may be anything
    the runtime had at hand, a secret included). Numbers and literals are written out."""
    if value is None or type(value) is bool:
        return orjson.dumps(value).decode()
    if type(value) is int or type(value) is float:
        text = repr(value)
        return text if len(text) <= _NUMBER_CHARS else f"(a number of {_many(len(text), 'digit')})"
    if type(value) is str:
        return f"(a string of {_many(len(value), 'character')})"
    if type(value) is list:
        return f"(an array of {_many(len(value), 'item')})"
    if type(value) is dict:
        return f"(an object of {_many(len(value), 'key')})"
    return f"({type(value).__name__})"


def _many(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _kind(value: object) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )
