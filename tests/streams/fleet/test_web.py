"""The fleet app's web port, as Faust's worker starts it (no broker needed): its own health and
metrics views, none of Faust's views of the cluster and the table."""

from __future__ import annotations

import socket

import aiohttp

from stallwatch.settings import Settings
from stallwatch_streams.fleet.service import FleetService
from stallwatch_streams.fleet.settings import FleetSettings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def statuses(paths: list[str]) -> dict[str, int]:
    port = free_port()
    service = FleetService(FleetSettings(base=Settings(web_bind="127.0.0.1"), web_port=port))
    web = service.app.web
    await web.start()
    try:
        async with aiohttp.ClientSession() as session:
            found = {}
            for path in paths:
                async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                    found[path] = response.status
            return found
    finally:
        await web.stop()


async def test_only_the_apps_own_views_are_served():
    found = await statuses(
        [
            "/incidents/",
            "/metrics",
            "/router/",
            "/table/",
            "/table/fleet-state/",
            "/graph/",
            "/stats/",
            "/performance/",
        ]
    )
    assert found.pop("/incidents/") == 200 and found.pop("/metrics") == 200
    assert found == dict.fromkeys(found, 404)
