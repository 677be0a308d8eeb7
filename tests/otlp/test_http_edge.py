"""The OTLP/HTTP endpoints of `stallwatch serve`: protobuf and JSON answers, gzip, bounds."""

from __future__ import annotations

import gzip

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from stallwatch.serve import otlp as serve_otlp
from tests.otlp.receiver import otlp_server
from tests.otlp.test_mapping import export, looping_spans


async def test_a_gzipped_protobuf_export_is_answered_in_protobuf_and_judged():
    async with otlp_server(tenant="acme") as server:
        body = gzip.compress(export(*looping_spans(8)))
        headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
        async with server.http.post(f"{server.url}/v1/traces", data=body, headers=headers) as response:
            assert response.status == 200 and response.content_type == "application/x-protobuf"
            ExportTraceServiceResponse.FromString(await response.read())
        runs = await server.runs()
        metrics = await server.metrics()
    assert list(runs) == ["conv-1"]
    assert [c["code"] for c in runs["conv-1"] if c["type"] == "would_stop"] == ["no_new_facts"]
    assert 'stallwatch_would_stops_total{code="no_new_facts",tenant="acme",tool=""} 1' in metrics


async def test_bad_exports_are_refused_and_nothing_else_changes(monkeypatch):
    monkeypatch.setattr(serve_otlp, "MAX_EXPORT_BYTES", 1000)
    async with otlp_server() as server:
        cases = [
            (b"garbage \xff", {"Content-Type": "application/x-protobuf"}, 400),
            (b"x" * 2000, {"Content-Type": "application/x-protobuf"}, 413),
            (
                gzip.compress(b"\x00" * 100_000),
                {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
                413,
            ),
            (b"{}", {"Content-Type": "text/plain"}, 415),
        ]
        for body, headers, status in cases:
            async with server.http.post(f"{server.url}/v1/traces", data=body, headers=headers) as response:
                assert response.status == status, (body[:20], headers)
                assert "error" in await response.json()
        async with server.http.post(
            f"{server.url}/v1/logs", data=b"{}", headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 200 and await response.json() == {}
        assert await server.runs() == {}
