"""The OTLP mapping on its own: rounds from spans in any order, what is counted and not guessed,
the log events of Codex and Claude Code, and hostile exports bounded."""

from __future__ import annotations

import gzip

import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.otlp import spans as otlp_spans
from stallwatch.otlp.ingest import OtlpIngest
from stallwatch.otlp.spans import BadRequest

TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
SECOND = 1_000_000_000


def attrs(**values: object) -> list[KeyValue]:
    out = []
    for key, value in values.items():
        any_value = (
            AnyValue(bool_value=value) if isinstance(value, bool) else AnyValue(string_value=str(value))
        )
        out.append(KeyValue(key=key.replace("__", "."), value=any_value))
    return out


def model(n: int, at: float, conversation: str = "conv-1") -> Span:
    return Span(
        trace_id=TRACE,
        span_id=n.to_bytes(8, "big"),
        parent_span_id=b"\x00" * 7 + b"\x01",
        name="chat",
        start_time_unix_nano=int(at * SECOND),
        end_time_unix_nano=int((at + 0.1) * SECOND),
        attributes=attrs(gen_ai__operation__name="chat", gen_ai__conversation__id=conversation),
    )


def tool(n: int, at: float, args: str | None, result: str | None, failed: bool = False, **extra) -> Span:
    values = {"gen_ai__operation__name": "execute_tool", "gen_ai__tool__name": "search", **extra}
    values.setdefault("gen_ai__conversation__id", "conv-1")
    if args is not None:
        values["gen_ai__tool__call__arguments"] = args
    if result is not None:
        values["gen_ai__tool__call__result"] = result
    return Span(
        trace_id=TRACE,
        span_id=n.to_bytes(8, "big"),
        parent_span_id=b"\x00" * 7 + b"\x01",
        name="execute_tool search",
        start_time_unix_nano=int(at * SECOND),
        end_time_unix_nano=int((at + 0.1) * SECOND),
        attributes=attrs(**values),
        status=Status(code=Status.STATUS_CODE_ERROR if failed else Status.STATUS_CODE_UNSET),
    )


def export(*spans: Span) -> bytes:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request.SerializeToString()


def looping_spans(rounds: int = 8) -> list[Span]:
    """A re-wording search: each round a model call and one search, every result the same."""
    out = []
    for r in range(rounds):
        out.append(model(100 + r, 10.0 * r))
        out.append(tool(200 + r, 10.0 * r + 1, orjson.dumps({"q": f"wording {r}"}).decode(), '{"docs": [1]}'))
    return out


def judged(events: list[dict]) -> list[tuple[str, int, str]]:
    engine = EmbeddedEngine()
    out = []
    for event in events:
        for c in engine.handle(event):
            if c.type == "would_stop":
                out.append(("stop", c.round, c.code))
            elif c.type == "verdict" and c.would_code:
                out.append(("refuse", c.round, c.would_code))
    return out


def test_in_order_the_round_closes_when_the_next_model_call_arrives():
    ingest = OtlpIngest()
    spans = looping_spans()
    first = ingest.traces(export(*spans[:3]), "application/x-protobuf")  # round 1, round 2's model
    assert [e["type"] for e in first] == [
        "run_started",
        "round_started",
        "call_proposed",
        "call_result",
        "round_ended",
    ]
    assert first[0]["policy"] == {"observe_only": True} and first[0]["run_id"] == "conv-1"
    # Digests only: neither the arguments nor the result leave the mapping.
    assert "args" not in first[2] and "result" not in first[3] and len(first[3]["fingerprint"]) == 32


def test_any_order_of_arrival_gives_the_same_decisions():
    spans = looping_spans()
    in_order = OtlpIngest()
    events = in_order.traces(export(*spans), "application/x-protobuf") + in_order.sweep_all()
    shuffled = OtlpIngest()
    mixed = [spans[i] for i in (1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14)]
    events_mixed = shuffled.traces(export(*mixed), "application/x-protobuf") + shuffled.sweep_all()
    assert (
        judged(events)
        == judged(events_mixed)
        == [("stop", 6, "no_new_facts")] + [("refuse", n, "run_stopped") for n in (7, 8)]
    )


def test_a_span_of_a_closed_round_is_counted_late_and_never_moved():
    spans = looping_spans(4)
    ingest = OtlpIngest()
    ingest.traces(export(*spans[:5]), "application/x-protobuf")  # rounds 1, 2 closed; 3 open
    late = tool(299, 11.5, '{"q": "late"}', '{"docs": [9]}')  # started in round 2
    assert ingest.traces(export(late), "application/x-protobuf") == []
    assert ingest.counts["late"] == 1


def test_an_exporters_retry_is_recognised():
    spans = looping_spans(3)
    ingest = OtlpIngest()
    ingest.traces(export(*spans), "application/x-protobuf")
    assert ingest.traces(export(*spans), "application/x-protobuf") == []
    assert ingest.counts["resent"] == len(spans)


def test_a_quiet_gap_closes_the_open_round():
    now = [0.0]
    ingest = OtlpIngest(quiet_s=30.0, clock=lambda: now[0])
    ingest.traces(export(*looping_spans(2)), "application/x-protobuf")
    assert ingest.sweep() == []
    now[0] = 31.0
    closed = ingest.sweep()
    assert [e["type"] for e in closed] == ["round_started", "call_proposed", "call_result", "round_ended"]
    assert closed[0]["round"] == 2


def test_missing_arguments_are_never_a_repeat_and_missing_results_never_seen_before():
    ingest = OtlpIngest()
    spans = []
    for r in range(8):
        spans += [model(100 + r, 10.0 * r), tool(200 + r, 10.0 * r + 1, None, None)]
    events = ingest.traces(export(*spans), "application/x-protobuf") + ingest.sweep_all()
    assert judged(events) == []
    assert ingest.counts["tool_without_arguments"] == 8 and ingest.counts["tool_without_result"] == 8


def test_a_failed_span_status_is_a_failed_call():
    ingest = OtlpIngest()
    spans = []
    for r in range(6):
        spans += [
            model(100 + r, 10.0 * r),
            tool(200 + r, 10.0 * r + 1, f'{{"u": {r}}}', "timeout", failed=True),
        ]
    events = ingest.traces(export(*spans), "application/x-protobuf") + ingest.sweep_all()
    assert judged(events)[0] == ("stop", 5, "tool_failures")


def test_spans_of_no_agent_are_counted_not_judged():
    other = Span(trace_id=TRACE, span_id=b"\x00" * 7 + b"\x09", parent_span_id=b"\x01" * 8, name="GET /")
    ingest = OtlpIngest()
    assert ingest.traces(export(other), "application/x-protobuf") == []
    assert ingest.counts["not_judged"] == 1


def test_otlp_json_with_hex_ids_reads_as_protobuf_does():
    from google.protobuf import json_format

    spans = looping_spans(3)
    data = json_format.MessageToDict(ExportTraceServiceRequest.FromString(export(*spans)))
    for span in data["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            span[key] = __import__("base64").b64decode(span[key]).hex()  # OTLP/JSON writes hex
    as_json = OtlpIngest().traces(orjson.dumps(data), "application/json")
    as_proto = OtlpIngest().traces(export(*spans), "application/x-protobuf")
    assert as_json == as_proto and as_json


@pytest.mark.parametrize(
    ("body", "content_type", "words"),
    [
        (b"\xff\xfe garbage", "application/x-protobuf", "not an OTLP export"),
        (b"[1, 2]", "application/json", "one JSON object"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            "application/json",
            "not hex",
        ),
        (b"{}", "text/plain", "content type"),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", "not an OTLP export"),
    ],
)
def test_a_request_that_is_no_export_is_refused_with_words(body, content_type, words):
    with pytest.raises(BadRequest, match=words):
        OtlpIngest().traces(body, content_type)


def test_past_the_request_limit_spans_are_counted_not_read(monkeypatch):
    monkeypatch.setattr(otlp_spans, "MAX_ITEMS_PER_REQUEST", 4)
    ingest = OtlpIngest()
    ingest.traces(export(*looping_spans(4)), "application/x-protobuf")
    assert ingest.counts["over_request_limit"] == 4 and ingest.counts["tool"] + ingest.counts["model"] == 4


def test_a_1_mib_argument_and_result_are_digested_within_bounds():
    big = "x" * (otlp_spans.MAX_VALUE_CHARS + 1)
    ingest = OtlpIngest()
    spans = [
        model(100, 0.0),
        tool(200, 1.0, big, big),
        model(101, 10.0),
        tool(201, 11.0, big, big),
        model(102, 20),
    ]
    events = ingest.traces(export(*spans), "application/x-protobuf")
    assert ingest.counts["oversized_value"] == 4
    assert judged(events) == [("refuse", 2, "duplicate_call")]  # the same 1 MiB argument, digested
    assert max(len(orjson.dumps(e)) for e in events) < 1_000


def log_record(name: str, at: float, **values: object) -> LogRecord:
    return LogRecord(time_unix_nano=int(at * SECOND), event_name=name, attributes=attrs(**values))


def logs_export(*records: LogRecord) -> bytes:
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.extend(records)
    return request.SerializeToString()


def test_codex_log_events_make_rounds_calls_and_results():
    records = []
    for r in range(8):
        records.append(log_record("codex.api_request", 10.0 * r, conversation__id="thread-1"))
        records.append(
            log_record(
                "codex.tool_result",
                10.0 * r + 1,
                conversation__id="thread-1",
                tool_name="shell",
                call_id=f"call-{r}",
                arguments='{"command": ["rg", "needle"]}',
                output="no matches",
                success="true",
            )
        )
    ingest = OtlpIngest()
    events = ingest.logs(logs_export(*records), "application/x-protobuf") + ingest.sweep_all()
    assert judged(events)[0] == ("refuse", 2, "duplicate_call")
    assert {e["run_id"] for e in events} == {"thread-1"}


def test_claude_code_tool_events_without_results_feed_only_the_repeat_check():
    records = []
    for r in range(8):
        records.append(log_record("claude_code.api_request", 10.0 * r, session__id="s-1"))
        records.append(
            log_record(
                "claude_code.tool_result",
                10.0 * r + 1,
                session__id="s-1",
                tool_name="Grep",
                tool_parameters=f'{{"pattern": "p{r}"}}',
                success="true",
            )
        )
    ingest = OtlpIngest()
    events = ingest.logs(logs_export(*records), "application/x-protobuf") + ingest.sweep_all()
    assert judged(events) == []  # new arguments each round, and no result to be seen twice
    assert ingest.counts["tool_without_result"] == 8


def test_a_log_event_without_its_session_is_counted_not_guessed():
    ingest = OtlpIngest()
    record = log_record("codex.tool_result", 1.0, tool_name="shell", arguments="{}", output="x")
    assert ingest.logs(logs_export(record), "application/x-protobuf") == []
    assert ingest.counts["no_run"] == 1


def test_gzip_is_undone_by_the_http_edge_only():
    with pytest.raises(BadRequest):
        OtlpIngest().traces(gzip.compress(export(*looping_spans(1))), "application/x-protobuf")
