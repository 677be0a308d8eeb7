"""OTLP/HTTP in: `POST /v1/traces` and `/v1/logs` (protobuf or JSON, gzip or not), judged
observe-only by the server's engine; what each run would have had at `GET /v1/otlp/runs/{id}`
and every count at `GET /metrics`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from typing import Any

import orjson
from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from stallwatch.client.run import Client
from stallwatch.contract.commands import Command
from stallwatch.otlp.ingest import OtlpIngest
from stallwatch.otlp.spans import BadRequest

log = logging.getLogger(__name__)

# An export past this (after gzip) is refused with 413: a batch of 512 spans with their
# arguments and results stays far below it.
MAX_EXPORT_BYTES = 16 * 1024 * 1024
# What is kept per run of what it would have had, for `GET /v1/otlp/runs/{id}`: the newest runs.
MAX_RUNS_SHOWN = 1_000
MAX_COMMANDS_SHOWN = 256
# (tenant, tool, code) label sets of the would-have counters: tool names come from spans.
MAX_DECISION_LABELS = 2_000


class OtlpReceiver:
    """The OTLP endpoints over one `OtlpIngest` and the server's client."""

    def __init__(self, client: Client, ingest: OtlpIngest, sweep_interval_s: float = 1.0) -> None:
        self.client = client
        self.ingest = ingest
        self.sweep_interval_s = sweep_interval_s
        self.would: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self.decisions: dict[tuple[str, str, str, str], int] = {}  # (kind, tenant, tool, code) -> count
        self._lock = asyncio.Lock()  # one request's events in order before the next's
        self._sweeper: asyncio.Task[None] | None = None

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/traces", self.traces),
            web.post("/v1/logs", self.logs),
            web.get("/v1/otlp/runs", self.run_ids),
            web.get("/v1/otlp/runs/{run_id}", self.run),
            web.get("/metrics", self.metrics),
        ]

    async def start(self, _: web.Application) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def stop(self, _: web.Application) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper

    async def traces(self, request: web.Request) -> web.Response:
        return await self._export(request, self.ingest.traces, ExportTraceServiceResponse())

    async def logs(self, request: web.Request) -> web.Response:
        return await self._export(request, self.ingest.logs, ExportLogsServiceResponse())

    async def run_ids(self, request: web.Request) -> web.Response:
        """The runs whose would-have decisions are held, oldest first."""
        return web.json_response({"runs": list(self.would)})

    async def run(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        commands = self.would.get(run_id)
        if commands is None:
            return web.json_response({"error": f"no OTLP run {run_id[:200]!r} held here"}, status=404)
        return web.json_response({"run_id": run_id, "observe_only": True, "commands": commands})

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus' text format, written here: the light install carries no prometheus-client."""
        lines = [
            "# HELP stallwatch_otlp_items_total OTLP spans and log records read, by outcome",
            "# TYPE stallwatch_otlp_items_total counter",
        ]
        lines += [
            f'stallwatch_otlp_items_total{{outcome="{_label(k)}"}} {v}'
            for k, v in sorted(self.ingest.counts.items())
        ]
        for kind, help_text in (
            ("refusals", "calls that would have been refused (they ran), by tenant, tool and code"),
            ("stops", "stops that would have happened (the runs went on), by tenant, tool and code"),
        ):
            lines += [
                f"# HELP stallwatch_would_{kind}_total Observe-only runs: {help_text}",
                f"# TYPE stallwatch_would_{kind}_total counter",
            ]
            lines += [
                f'stallwatch_would_{kind}_total{{code="{_label(code)}",tenant="{_label(tenant)}",'
                f'tool="{_label(tool)}"}} {count}'
                for (k, tenant, tool, code), count in sorted(self.decisions.items())
                if k == kind
            ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _export(self, request: web.Request, read: Any, response: Any) -> web.Response:
        content_type = request.headers.get("Content-Type", "application/x-protobuf")
        as_json = content_type.split(";", 1)[0].strip().lower() == "application/json"
        try:
            body = await _body(request)
            async with self._lock:
                events = read(body, content_type)
                await self._apply(events)
        except BadRequest as exc:
            return web.json_response({"error": str(exc)}, status=400)
        except _TooLarge as exc:
            return web.json_response({"error": str(exc)}, status=413)
        if as_json:
            return web.json_response({})
        return web.Response(body=response.SerializeToString(), content_type="application/x-protobuf")

    async def _apply(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            commands = await self.client.submit(event)
            if commands:
                self._record(event, commands)

    def _record(self, event: dict[str, Any], commands: list[Command]) -> None:
        run_id = event["run_id"]
        kept = self.would.get(run_id)
        if kept is None:
            kept = self.would[run_id] = []
            if len(self.would) > MAX_RUNS_SHOWN:
                self.would.popitem(last=False)
        tenant = self.ingest.assembler.tenant or ""
        for command in commands:
            key: tuple[str, str, str, str] | None
            if command.type == "verdict" and command.would_code is not None:
                key = ("refusals", tenant, command.tool or "", command.would_code)
            elif command.type == "would_stop":
                named = command.detail.get("tool")
                key = ("stops", tenant, named if isinstance(named, str) else "", command.code)
            elif command.type == "would_nudge":
                key = None
            else:
                continue
            if key is not None and (key in self.decisions or len(self.decisions) < MAX_DECISION_LABELS):
                self.decisions[key] = self.decisions.get(key, 0) + 1
            if len(kept) < MAX_COMMANDS_SHOWN:
                kept.append(orjson.loads(orjson.dumps(command)))

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                async with self._lock:
                    await self._apply(self.ingest.sweep())
            except Exception:  # a fault in one sweep must not end the next ones
                log.exception("stallwatch could not close quiet OTLP runs")


class _TooLarge(Exception):
    pass


async def _body(request: web.Request) -> bytes:
    """The export's bytes, never more than MAX_EXPORT_BYTES. aiohttp undoes a gzip (or deflate)
    Content-Encoding as it reads, and counts the inflated bytes against its client_max_size."""
    if request.content_length is not None and request.content_length > MAX_EXPORT_BYTES:
        raise _TooLarge(f"an export of {request.content_length} bytes; at most {MAX_EXPORT_BYTES}")
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _TooLarge(f"an export over {MAX_EXPORT_BYTES} bytes once inflated") from None
    if len(body) > MAX_EXPORT_BYTES:
        raise _TooLarge(f"an export over {MAX_EXPORT_BYTES} bytes once inflated")
    return body


def _label(value: str) -> str:
    """A label value as the text format writes it: backslash, quote and newline escaped, bounded."""
    text = value[:200]
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
