"""`stallwatch serve --kafka` with OTLP in: the events made from spans go to the events topic,
and a real worker judges them observe-only, as the in-process engine does."""

from __future__ import annotations

import aiohttp
import orjson
import pytest
from aiohttp import web

from stallwatch.client import KafkaClient
from stallwatch.otlp.ingest import OtlpIngest
from stallwatch.serve.app import make_app
from stallwatch.serve.hooks import HookSettings
from stallwatch.serve.otlp import OtlpReceiver
from stallwatch.serve.service import Service
from tests.kafka_harness import PROBE_PREFIX, by_run, collect, serving_worker
from tests.otlp.receiver import would_have
from tests.otlp.test_mapping import export, looping_spans

pytestmark = pytest.mark.kafka


async def test_spans_posted_to_a_kafka_backed_server_are_judged_by_the_workers():
    async with serving_worker(partitions=2) as (settings, _), KafkaClient(settings) as client:
        receiver = OtlpReceiver(client, OtlpIngest())
        runner = web.AppRunner(make_app(Service(client), None, HookSettings(), receiver))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/traces"
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.post(
                    url, data=export(*looping_spans(8)), headers={"Content-Type": "application/x-protobuf"}
                ) as response,
            ):
                assert response.status == 200
            # 7 rounds closed (the 8th waits for its next model call): 7 verdicts, nudge and stop
            published = await collect(settings, settings.commands_topic, 9, 60)
        finally:
            await runner.cleanup()
    runs = {r: c for r, c in by_run(published).items() if not r.startswith(PROBE_PREFIX)}
    assert list(runs) == ["conv-1"]
    commands = [orjson.loads(c) for c in runs["conv-1"]]
    assert would_have(commands) == [
        ("nudge", 4, ""),
        ("stop", 6, "no_new_facts"),
        ("refuse", 7, "run_stopped"),
    ]
    assert all(c["decision"] == "allow" for c in commands if c["type"] == "verdict")
