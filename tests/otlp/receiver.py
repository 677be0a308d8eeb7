"""A `stallwatch serve` with its OTLP receiver on a loopback port, and real emitters' exporters
pointed at it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from stallwatch.client import EmbeddedClient
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.otlp.ingest import OtlpIngest
from stallwatch.serve.app import make_app
from stallwatch.serve.hooks import HookSettings
from stallwatch.serve.otlp import OtlpReceiver
from stallwatch.serve.service import Service


@dataclass
class OtlpServer:
    url: str
    http: aiohttp.ClientSession
    receiver: OtlpReceiver

    def tracer_provider(self) -> TracerProvider:
        """The SDK's provider exporting in batches through the real OTLP/HTTP exporter, as a
        platform team's agents do (flushed by the test)."""
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{self.url}/v1/traces")))
        return provider

    async def runs(self) -> dict[str, list[dict[str, Any]]]:
        """Every run the server judged from spans, and what it would have done in each."""
        async with self.http.get(f"{self.url}/v1/otlp/runs") as response:
            ids = (await response.json())["runs"]
        out = {}
        for run_id in ids:
            async with self.http.get(f"{self.url}/v1/otlp/runs/{run_id}") as response:
                out[run_id] = (await response.json())["commands"]
        return out

    async def metrics(self) -> str:
        async with self.http.get(f"{self.url}/metrics") as response:
            return await response.text()


@contextlib.asynccontextmanager
async def otlp_server(
    admin_policy: AdminPolicy | None = None, tenant: str | None = None
) -> AsyncIterator[OtlpServer]:
    async with EmbeddedClient(admin_policy) as client:
        receiver = OtlpReceiver(client, OtlpIngest(tenant=tenant))
        runner = web.AppRunner(make_app(Service(client), None, HookSettings(), receiver))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = int(runner.addresses[0][1])
        try:
            async with aiohttp.ClientSession() as http:
                yield OtlpServer(f"http://127.0.0.1:{port}", http, receiver)
        finally:
            await runner.cleanup()


def would_have(commands: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    """(what, round, code) of each would-have decision, in order."""
    out = []
    for c in commands:
        if c["type"] == "verdict" and c.get("would_code") is not None:
            out.append(("refuse", c["round"], c["would_code"]))
        elif c["type"] == "would_stop":
            out.append(("stop", c["round"], c["code"]))
        elif c["type"] == "would_nudge":
            out.append(("nudge", c["round"], ""))
    return out


def decided(commands: list) -> list[tuple[str, int, str]]:
    """The same for an enforced run's commands as the in-process engine gave them."""
    out = []
    for c in commands:
        if c.type == "verdict" and c.decision == "refuse":
            out.append(("refuse", c.round, c.code))
        elif c.type == "stop":
            out.append(("stop", c.round, c.code))
        elif c.type == "nudge":
            out.append(("nudge", c.round, ""))
    return out


def record_commands(client: EmbeddedClient) -> list[Any]:
    """Every command the client's engine answers from now on, in order: what an adapter decides
    in process, to set beside what the spans are judged to."""
    seen: list[Any] = []
    apply = client._apply

    def recording(event: dict[str, Any]) -> list[Any]:
        commands = apply(event)
        seen.extend(commands)
        return commands

    client._apply = recording
    return seen
