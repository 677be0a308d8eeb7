"""OTLP requests (protobuf or JSON) read into what stallwatch judges: model calls and tool calls,
each with its run, times, and a tool call's arguments, result and status. Pure: no I/O."""

from __future__ import annotations

import base64
import binascii
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from xxhash import xxh3_64_digest

from stallwatch.otlp import conventions as c

# Bounds on what one request may hold, whoever sends it. A span or log record is read in time
# linear in its size: its attributes are scanned once, and an argument or result past
# MAX_VALUE_CHARS is judged by its digest alone (never parsed).
MAX_ITEMS_PER_REQUEST = 20_000  # spans or log records; past it the rest is counted, not read
MAX_VALUE_CHARS = 1_048_576  # an argument or result longer is digested, not parsed
MAX_ATTRIBUTES_READ = 256  # attributes of one span looked at; past it, counted

Kind = Literal["model", "tool", "root"]


class BadRequest(ValueError):
    """A request that is no OTLP export: the whole request is refused with these words."""


@dataclass(slots=True)
class Observed:
    """One model call, tool call or root span's end, as the assembler orders them into rounds."""

    kind: Kind
    run: str  # the run's key: a conversation or session id, else the trace id (hex)
    by_trace: bool  # keyed by its trace: the run ends with its root span
    at: int  # start time, ns since the epoch
    until: int  # end time, ns
    ident: str  # the span's id (hex) or the log record's digest: a re-sent one is recognised
    tool: str = ""
    call_id: str = ""
    args: Any = None
    has_args: bool = False
    result: Any = None
    has_result: bool = False
    failed: bool = False
    oversized: bool = False  # an argument or result past MAX_VALUE_CHARS: digested, not parsed


def decode_traces(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    return _decode(ExportTraceServiceRequest(), body, content_type, "resourceSpans", "scopeSpans", "spans")


def decode_logs(body: bytes, content_type: str) -> ExportLogsServiceRequest:
    return _decode(ExportLogsServiceRequest(), body, content_type, "resourceLogs", "scopeLogs", "logRecords")


def _decode(message: Any, body: bytes, content_type: str, outer: str, middle: str, inner: str) -> Any:
    kind = content_type.split(";", 1)[0].strip().lower()
    try:
        if kind == "application/json":
            data = orjson.loads(body)
            if not isinstance(data, dict):
                raise BadRequest("an OTLP/JSON export is one JSON object")
            _hex_ids_to_base64(data, outer, middle, inner)
            json_format.ParseDict(data, message, ignore_unknown_fields=True)
        elif kind in ("application/x-protobuf", "application/protobuf", ""):
            message.ParseFromString(body)
        else:
            raise BadRequest(f"content type {kind!r}: send application/x-protobuf or application/json")
    except (orjson.JSONDecodeError, json_format.ParseError, DecodeError, RecursionError) as exc:
        raise BadRequest(f"not an OTLP export ({type(exc).__name__}: {str(exc)[:200]})") from None
    return message


def _hex_ids_to_base64(data: dict, outer: str, middle: str, inner: str) -> None:
    """OTLP/JSON writes trace and span ids in hex, where protobuf's JSON mapping reads base64."""
    for resource in _dicts(data.get(outer)):
        for scope in _dicts(resource.get(middle)):
            for item in _dicts(scope.get(inner)):
                for key in ("traceId", "spanId", "parentSpanId"):
                    value = item.get(key)
                    if isinstance(value, str) and value:
                        try:
                            item[key] = base64.b64encode(bytes.fromhex(value)).decode()
                        except ValueError:
                            raise BadRequest(f"{key} {value[:40]!r} is not hex") from None


def _dicts(value: object) -> Iterator[dict]:
    if isinstance(value, list):
        yield from (v for v in value if isinstance(v, dict))


def spans_of(request: ExportTraceServiceRequest, counts: Counter) -> Iterator[Observed]:
    """The request's spans that stallwatch judges; every other span counted by why it was not."""
    seen = 0
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                seen += 1
                if seen > MAX_ITEMS_PER_REQUEST:
                    counts["over_request_limit"] += 1
                    continue
                yield from _span(span, counts)


def _span(span: Span, counts: Counter) -> Iterator[Observed]:
    attrs = _attributes(span.attributes, counts)
    run, by_trace = _run_of(attrs)
    if run is None:
        run, by_trace = span.trace_id.hex(), True
    if not run:
        counts["no_run"] += 1
        return
    ident = span.span_id.hex() or binascii.hexlify(span.SerializeToString()[:16]).decode()
    operation = attrs.get(c.OPERATION)
    kind = attrs.get(c.SPAN_KIND) or attrs.get(c.TRACELOOP_KIND)
    at, until = span.start_time_unix_nano, span.end_time_unix_nano
    if operation in c.MODEL_OPERATIONS or kind == "LLM":
        counts["model"] += 1
        yield Observed("model", run, by_trace, at, until, ident)
    elif operation == c.TOOL_OPERATION or kind in ("TOOL", "tool"):
        yield _tool(
            attrs, run, by_trace, at, until, ident, span.status.code == Status.STATUS_CODE_ERROR, counts
        )
    elif not span.parent_span_id:
        pass  # a root of another kind: counted below
    else:
        counts["not_judged"] += 1  # an HTTP call, a chain step: nothing stallwatch judges
    if not span.parent_span_id:
        counts["root"] += 1
        yield Observed("root", run, by_trace, until, until, ident + ":end")


def logs_of(request: ExportLogsServiceRequest, counts: Counter) -> Iterator[Observed]:
    """The request's Codex and Claude Code events; every other log record counted."""
    seen = 0
    for resource in request.resource_logs:
        for scope in resource.scope_logs:
            for record in scope.log_records:
                seen += 1
                if seen > MAX_ITEMS_PER_REQUEST:
                    counts["over_request_limit"] += 1
                    continue
                item = _log(record, counts)
                if item is not None:
                    yield item


def _log(record: LogRecord, counts: Counter) -> Observed | None:
    attrs = _attributes(record.attributes, counts)
    name = record.event_name or attrs.get("event.name") or _text(record.body)
    if name not in c.MODEL_EVENTS and name not in c.TOOL_EVENTS:
        counts["not_judged"] += 1
        return None
    run, _ = _run_of(attrs)
    if run is None:
        counts["no_run"] += 1  # a log event without its session: never guessed from another
        return None
    at = record.time_unix_nano or record.observed_time_unix_nano
    ident = record.span_id.hex() + ":" + binascii.hexlify(_digest(record)).decode()
    if name in c.MODEL_EVENTS:
        counts["model"] += 1
        return Observed("model", run, False, at, at, ident)
    success = attrs.get(c.EVENT_SUCCESS)
    failed = success is False or (isinstance(success, str) and success.lower() == "false")
    item = Observed("tool", run, False, at, at, ident, failed=failed)
    item.tool = _first(attrs, c.EVENT_TOOL_NAME) or ""
    item.call_id = _first(attrs, c.EVENT_CALL_ID) or ident
    _fill(item, attrs, c.EVENT_ARGUMENTS, c.EVENT_RESULT, counts)
    return item


def _tool(
    attrs: dict[str, Any],
    run: str,
    by_trace: bool,
    at: int,
    until: int,
    ident: str,
    failed: bool,
    counts: Counter,
) -> Observed:
    item = Observed("tool", run, by_trace, at, until, ident, failed=failed)
    item.tool = _first(attrs, c.TOOL_NAME) or ""
    item.call_id = _first(attrs, c.TOOL_CALL_ID) or ident
    _fill(item, attrs, c.TOOL_ARGUMENTS, c.TOOL_RESULT, counts)
    return item


def _fill(
    item: Observed,
    attrs: dict[str, Any],
    args_keys: Iterable[str],
    result_keys: Iterable[str],
    counts: Counter,
) -> None:
    if not item.tool:
        counts["tool_without_name"] += 1
        item.tool = "unnamed"
    for key in args_keys:
        if key in attrs:
            item.args, item.has_args = attrs[key], True
            break
    else:
        counts["tool_without_arguments"] += 1
    for key in result_keys:
        if key in attrs:
            item.result, item.has_result = attrs[key], True
            break
    else:
        counts["tool_without_result"] += 1
    if item.has_result and isinstance(item.result, str) and item.result.startswith(_TOOL_MESSAGE_START):
        _unwrap_tool_message(item, counts)
    for value in (item.args, item.result):
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            item.oversized = True
            counts["oversized_value"] += 1
    counts["tool"] += 1


# OpenInference's LangChain instrumentation records a tool's output as LangChain's serialised
# ToolMessage, whose `tool_call_id` and `id` differ on every call: compared whole, no two results
# would ever be the same. Its `content` is the tool's result, and its `tool_call_id` the call's id.
_TOOL_MESSAGE_START = '{"type": "tool", "data": {'


def _unwrap_tool_message(item: Observed, counts: Counter) -> None:
    if len(item.result) > MAX_VALUE_CHARS:
        return  # digested whole, not parsed
    try:
        message = orjson.loads(item.result)
    except orjson.JSONDecodeError:
        return
    data = message.get("data") if isinstance(message, dict) else None
    if not isinstance(data, dict) or "content" not in data:
        return
    item.result = data["content"]
    call_id = data.get("tool_call_id")
    if isinstance(call_id, str) and call_id and item.call_id == item.ident:
        item.call_id = call_id
    if data.get("status") == "error":
        item.failed = True
    counts["langchain_tool_message"] += 1


def _run_of(attrs: dict[str, Any]) -> tuple[str | None, bool]:
    run = _first(attrs, c.RUN_KEYS)
    return (run, False) if run else (None, False)


def _first(attrs: dict[str, Any], keys: Iterable[str]) -> str | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
    return None


def _attributes(pairs: Iterable[KeyValue], counts: Counter) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n, pair in enumerate(pairs):
        if n >= MAX_ATTRIBUTES_READ:
            counts["attributes_past_limit"] += 1
            break
        out[pair.key] = _value(pair.value)
    return out


def _value(value: AnyValue, depth: int = 0) -> Any:
    """An attribute's value as JSON-like data (bounded depth: OTLP nests arrays and maps)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(v, depth + 1) for v in value.array_value.values] if depth < 32 else None
    if which == "kvlist_value":
        return (
            {kv.key: _value(kv.value, depth + 1) for kv in value.kvlist_value.values} if depth < 32 else None
        )
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def _text(value: AnyValue) -> str | None:
    return value.string_value if value.WhichOneof("value") == "string_value" else None


def _digest(record: LogRecord) -> bytes:
    return xxh3_64_digest(record.SerializeToString(deterministic=True))
