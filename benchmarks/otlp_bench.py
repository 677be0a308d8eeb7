"""Spans per second through the OTLP path beside events per second through the events path, in
one run on the same machine.

    python benchmarks/otlp_bench.py [--runs 400] [--rounds 20]

The same fleet both ways: `runs` researcher runs of `rounds` rounds each, one model call and one
search per round (arguments and results of a few hundred bytes, as Pydantic AI records them).
The OTLP path: OTLP/HTTP protobuf exports of 512 spans each (the SDK's batch size) through
`OtlpIngest` (decode, map, digest, validate) and the embedded engine. The events path: the
equivalent contract events as JSON lines through `EmbeddedEngine.replay` (`stallwatch replay`'s
engine). Best of three each, measured one after the other.
"""

from __future__ import annotations

import argparse
import gc
import time

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from stallwatch.contract.envelope import envelope
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch.otlp.ingest import OtlpIngest

SECOND = 1_000_000_000
BATCH = 512
RESULT = orjson.dumps(
    {"documents": [{"id": f"doc-{i}", "title": "Log compaction " * 4} for i in range(4)]}
).decode()


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def fleet(runs: int, rounds: int) -> tuple[list[bytes], list[bytes], int]:
    """(OTLP exports, event log lines, spans) of the same fleet."""
    spans: list[Span] = []
    lines: list[bytes] = []
    for r in range(runs):
        conversation = f"conv-{r:06d}"
        trace = r.to_bytes(16, "big")
        lines.append(
            orjson.dumps(envelope("run_started", conversation, f"{conversation}/s", 0.0, mode="researcher"))
        )
        for n in range(rounds):
            at = (n * 10 + 1) * SECOND
            args = orjson.dumps({"q": f"how does kafka compact a topic, wording {n % 7}"}).decode()
            common = [_kv("gen_ai.conversation.id", conversation), _kv("gen_ai.agent.name", "researcher")]
            spans.append(
                Span(
                    trace_id=trace,
                    span_id=(r * 1000 + 2 * n + 1).to_bytes(8, "big"),
                    parent_span_id=b"\x00" * 7 + b"\x01",
                    name="chat model",
                    start_time_unix_nano=at,
                    end_time_unix_nano=at + SECOND // 2,
                    attributes=[_kv("gen_ai.operation.name", "chat"), *common],
                )
            )
            spans.append(
                Span(
                    trace_id=trace,
                    span_id=(r * 1000 + 2 * n + 2).to_bytes(8, "big"),
                    parent_span_id=b"\x00" * 7 + b"\x01",
                    name="execute_tool search",
                    start_time_unix_nano=at + SECOND,
                    end_time_unix_nano=at + 2 * SECOND,
                    attributes=[
                        _kv("gen_ai.operation.name", "execute_tool"),
                        _kv("gen_ai.tool.name", "search"),
                        _kv("gen_ai.tool.call.id", f"tc-{n}"),
                        _kv("gen_ai.tool.call.arguments", args),
                        _kv("gen_ai.tool.call.result", RESULT),
                        *common,
                    ],
                )
            )
            ts = at / SECOND
            lines.append(
                orjson.dumps(envelope("round_started", conversation, f"{conversation}/{n}a", ts, round=n + 1))
            )
            lines.append(
                orjson.dumps(
                    envelope(
                        "call_proposed",
                        conversation,
                        f"{conversation}/{n}b",
                        ts,
                        round=n + 1,
                        call_id=f"tc-{n}",
                        tool="search",
                        args=args,
                    )
                )
            )
            lines.append(
                orjson.dumps(
                    envelope(
                        "call_result",
                        conversation,
                        f"{conversation}/{n}c",
                        ts,
                        round=n + 1,
                        call_id=f"tc-{n}",
                        tool="search",
                        status="ok",
                        result=RESULT,
                    )
                )
            )
            lines.append(
                orjson.dumps(envelope("round_ended", conversation, f"{conversation}/{n}d", ts, round=n + 1))
            )
    exports = []
    for i in range(0, len(spans), BATCH):
        request = ExportTraceServiceRequest()
        request.resource_spans.add().scope_spans.add().spans.extend(spans[i : i + BATCH])
        exports.append(request.SerializeToString())
    return exports, lines, len(spans)


def otlp_path(exports: list[bytes]) -> int:
    engine = EmbeddedEngine()
    ingest = OtlpIngest()
    events = 0
    for body in exports:
        for event in ingest.traces(body, "application/x-protobuf"):
            engine.handle(event)
            events += 1
    for event in ingest.sweep_all():
        engine.handle(event)
        events += 1
    return events


def events_path(lines: list[bytes]) -> int:
    return sum(1 for _ in EmbeddedEngine().replay(lines))


def best_of(runs: int, fn, arg) -> tuple[float, int]:
    best, out = float("inf"), 0
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        out = fn(arg)
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    exports, lines, spans = fleet(args.runs, args.rounds)
    otlp_s, otlp_events = best_of(3, otlp_path, exports)
    replay_s, replayed = best_of(3, events_path, lines)
    rounds = args.runs * args.rounds
    print(f"fleet: {args.runs} runs x {args.rounds} rounds; {spans} spans in {len(exports)} exports")
    print(
        f"OTLP path   : {spans / otlp_s:>10,.0f} spans/s "
        f"({otlp_events / otlp_s:>10,.0f} events/s made and judged)"
    )
    print(f"events path : {replayed / replay_s:>10,.0f} events/s ({len(lines)} events, replay's engine)")
    print(f"per round   : OTLP {otlp_s / rounds * 1e6:.1f} µs, events {replay_s / rounds * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
