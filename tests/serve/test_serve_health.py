"""`serve --kafka`'s health says whether verdicts come: a server whose calls time out (no worker
judges) says it fails open, and says they arrive once a worker answers."""

from __future__ import annotations

import sys
from typing import Any

import aiohttp
import pytest

from stallwatch.kafka.topics import ensure_topics
from tests.kafka_harness import (
    StallwatchProcess,
    WorkerProcess,
    free_port,
    fresh_settings,
    wait_until_serving,
)
from tests.waiting import until

pytestmark = pytest.mark.kafka


async def health(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/v1/health") as response:
        assert response.status == 200
        return await response.json()


async def until_connected(http: aiohttp.ClientSession, url: str, serve: StallwatchProcess) -> dict[str, Any]:
    async def connected() -> dict[str, Any] | None:
        assert serve.alive(), serve.log_tail()
        try:
            said = await health(http, url)
        except aiohttp.ClientError:
            return None
        return said if said.get("broker") == "connected" else None

    return await until(connected, 60, lambda: f"serve --kafka connected:\n{serve.log_tail()}", interval_s=0.2)


async def test_health_says_whether_verdicts_come():
    settings = fresh_settings(partitions=2)
    await ensure_topics(settings)  # the topics, and no worker
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "stallwatch.cli.main", "serve", "--kafka", "--port", str(port)]
    token = "health-test-token"  # run-changing calls need the session's token
    serve = StallwatchProcess(settings, "serve", "serve-health", {"STALLWATCH_SERVE_TOKEN": token}, argv=argv)
    worker = None
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            said = await until_connected(http, url, serve)
            assert said["status"] == "ok" and said["verdicts"] == "no call asked yet"
            async with http.post(f"{url}/v1/runs", json={"run_id": "h1", "tools": [{"name": "search"}]}) as r:
                assert r.status == 201, await r.text()
            async with http.post(f"{url}/v1/runs/h1/calls", json={"tool": "search", "args": {"q": 1}}) as r:
                assert r.status == 200, await r.text()
            said = await health(http, url)
            assert said["status"] == "failing open" and "no verdict within" in said["verdicts"], said
            worker = WorkerProcess(settings, "late")
            await wait_until_serving(settings)
            async with http.post(f"{url}/v1/runs", json={"run_id": "h2", "tools": [{"name": "search"}]}) as r:
                assert r.status == 201, await r.text()
            async with http.post(f"{url}/v1/runs/h2/calls", json={"tool": "search", "args": {"q": 2}}) as r:
                assert r.status == 200, await r.text()
            said = await health(http, url)
            assert said["status"] == "ok" and said["verdicts"] == "arriving", said
            assert said["answered"] == 1 and said["timed_out"] == 1
    finally:
        serve.stop()
        if worker is not None:
            worker.stop()
