"""Liveness follows the loop's progress, readiness the restore: served by aiohttp, no broker."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

from stallwatch_streams.worker.health import HealthServer
from stallwatch_streams.worker.progress import Progress
from tests.addresses import free_port


def get(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def test_live_while_the_loop_progresses_dead_when_it_stalls_ready_after_restore():
    now = [1000.0]
    progress = Progress(clock=lambda: now[0])
    port = free_port()
    server = HealthServer(progress, stall_timeout_s=0.3, host="127.0.0.1", port=port)
    await server.start()
    try:
        progress.tick()
        assert await asyncio.to_thread(get, port, "/health/ready") == (503, {"ready": False})
        status, body = await asyncio.to_thread(get, port, "/health/live")
        assert status == 200 and body["live"] is True
        now[0] += 0.4  # no tick: the loop is stuck somewhere
        status, body = await asyncio.to_thread(get, port, "/health/live")
        assert status == 503 and body["seconds_since_progress"] >= 0.3
        progress.tick()
        progress.restoring = False
        assert (await asyncio.to_thread(get, port, "/health/live"))[0] == 200
        assert await asyncio.to_thread(get, port, "/health/ready") == (200, {"ready": True})
    finally:
        await server.stop()
