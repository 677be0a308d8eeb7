"""The fleet app's web port, as Faust's worker starts it (no broker needed): its own views only,
none of Faust's views of the cluster and the table, and each tenant's incidents to that
tenant's reader alone."""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from stallwatch.settings import TENANT_NAME, Settings, SetupError
from stallwatch_streams.fleet.readers import RELOAD_S, Readers, is_tenant_name
from stallwatch_streams.fleet.service import FleetService
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.tally import tally_key
from stallwatch_streams.fleet.tasks import IncidentTasks
from tests.kafka_harness import fresh_settings
from tests.streams.fleet.harness import FleetProcess, Reader, Tallies, tally

T0 = 1_800_000_000.0
ACME, GLOBEX, SHARED = (
    "acme-token-0123456789abcdef",
    "globex-token-0123456789abcdef",
    "shared-token-0123456789",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def outward_address() -> str | None:
    """This machine's address on its first non-loopback interface, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.51.100.1", 9))  # no packet is sent: only the route is looked up
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") else address


@asynccontextmanager
async def serving(
    tokens: Path | None = None, bind: str = "127.0.0.1"
) -> AsyncIterator[tuple[FleetService, int]]:
    port = free_port()
    cfg = FleetSettings(
        base=Settings(web_bind=bind), web_port=port, reader_tokens_dir=None if tokens is None else str(tokens)
    )
    service = FleetService(cfg)
    # The judge's view over a plain mapping, as the tasks' tests drive it: two tenants' incidents
    # and the shared topic's, each on a tool failing for five runs.
    service.tasks = IncidentTasks(cfg, {}, service.rules, service.metrics)
    for tenant in ("acme", "globex", None):
        key = tally_key(tenant, "search")
        for i in range(5):
            partial = tally("search", T0 + i, tenant=tenant, runs=[f"r{i}"], calls=1, failures=1)
            service.tasks.for_record(0).apply(key, partial, 0.0)
    web = service.app.web
    await web.start()
    try:
        yield service, port
    finally:
        await web.stop()


async def get(port: int, path: str, token: str | None = None, host: str = "127.0.0.1") -> tuple[int, Any]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{host}:{port}{path}", headers=headers) as response,
    ):
        body = await response.json() if response.content_type == "application/json" else None
        return response.status, body


def tenants_of(body: Any) -> set[str | None]:
    return {incident["tenant"] for incident in body["open"]}


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    folder = tmp_path / "readers"
    folder.mkdir()
    (folder / "acme").write_text(ACME + "\n")
    (folder / "globex").write_text(GLOBEX)
    (folder / "shared.token").write_text(SHARED)
    (folder / "..data").mkdir()  # the kubelet's own entries are passed over
    return folder


async def test_only_the_apps_own_views_are_served() -> None:
    async with serving() as (_, port):
        found = {
            path: (await get(port, path))[0]
            for path in [
                "/incidents/",
                "/health/ready",
                "/router/",
                "/table/",
                "/table/fleet-state/",
                "/graph/",
                "/stats/",
                "/performance/",
            ]
        }
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as r:
            assert r.status == 200
    assert found.pop("/incidents/") == 200 and found.pop("/health/ready") == 200
    assert found == dict.fromkeys(found, 404)


async def test_a_tenants_token_reads_its_own_list_and_no_other(tokens: Path) -> None:
    async with serving(tokens) as (_, port):
        status, body = await get(port, "/incidents/acme/", ACME)
        assert status == 200 and tenants_of(body) == {"acme"} and body["open"][0]["tool"] == "search"
        status, body = await get(port, "/incidents/globex/", GLOBEX)
        assert status == 200 and tenants_of(body) == {"globex"}
        status, body = await get(port, "/incidents/", SHARED)
        assert status == 200 and tenants_of(body) == {None}
        # Another tenant's list, the shared one, a tenant without a token, no token, a wrong one:
        # one answer for all, from loopback too (with tokens set, every reader needs one).
        for path, token in [
            ("/incidents/globex/", ACME),
            ("/incidents/", ACME),
            ("/incidents/acme/", SHARED),
            ("/incidents/initech/", ACME),
            ("/incidents/acme/", None),
            ("/incidents/acme/", ACME[:-1] + "x"),
            ("/incidents/acme/", ACME + ACME),
        ]:
            status, body = await get(port, path, token)
            assert (status, body) == (
                401,
                {"error": "send this list's reader token: `Authorization: Bearer <token>`"},
            ), (
                path,
                token,
            )
        status, _ = await get(port, "/health/ready")
        assert status == 200, "readiness needs no token and shows nothing of a tenant"


async def test_without_tokens_the_lists_answer_this_host_only() -> None:
    outward = outward_address()
    if outward is None:
        pytest.skip("this machine has no address beyond loopback to call from")
    async with serving(bind="0.0.0.0") as (_, port):  # as the manifests bind it
        status, body = await get(port, "/incidents/acme/")
        assert status == 200 and tenants_of(body) == {"acme"}
        for path in ["/incidents/acme/", "/incidents/"]:
            status, body = await get(port, path, host=outward)
            assert (status, body) == (403, {"error": "the incidents lists answer only to this host"})
        assert (await get(port, "/health/ready", host=outward))[0] == 200


def test_without_tokens_a_bind_beyond_loopback_is_warned_at_start(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        Readers(None, "127.0.0.1").warn_if_local_only()
        assert caplog.text == ""
        Readers(None, "0.0.0.0").warn_if_local_only()
    assert "STALLWATCH_FLEET_READER_TOKENS_DIR is unset" in caplog.text and "0.0.0.0" in caplog.text


@pytest.mark.parametrize(
    "name", ["acme", "a", "A-b_9", "x" * 64, "x" * 65, "", "..data", "acme.eu", "shared.token", "é", "a b"]
)
def test_a_token_file_is_a_tenants_when_its_name_is_a_tenants_name(name: str) -> None:
    assert is_tenant_name(name) == bool(re.fullmatch(TENANT_NAME, name))


def test_without_tokens_a_peer_beyond_loopback_is_refused() -> None:
    readers = Readers(None, "127.0.0.1")
    assert readers.allows("acme", "127.0.0.1", None) and readers.allows(None, "::1", None)
    assert not readers.allows("acme", "192.0.2.7", None) and not readers.allows(None, None, None)


def test_a_token_added_or_rotated_takes_effect_at_the_next_reading(tokens: Path) -> None:
    now = [0.0]
    readers = Readers(tokens, "0.0.0.0", clock=lambda: now[0])
    assert readers.allows("acme", "192.0.2.7", f"Bearer {ACME}")
    (tokens / "acme").write_text("rotated-0123456789abcdef")
    (tokens / "initech").write_text("initech-0123456789abcdef")
    assert readers.allows("acme", None, f"Bearer {ACME}"), "read again only every few seconds"
    now[0] += RELOAD_S
    assert not readers.allows("acme", None, f"Bearer {ACME}")
    assert readers.allows("acme", None, "Bearer rotated-0123456789abcdef")
    assert readers.allows("initech", None, "Bearer initech-0123456789abcdef")
    assert not readers.allows("acme", None, "rotated-0123456789abcdef"), "the Bearer scheme only"


def test_a_short_token_closes_its_list_and_a_missing_folder_stops_the_start(
    tokens: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tokens / "acme").write_text("tiny-secret")
    with caplog.at_level(logging.ERROR):
        readers = Readers(tokens, "0.0.0.0")
    assert not readers.allows("acme", None, "Bearer tiny-secret")
    assert "reader token acme" in caplog.text and "tiny-secret" not in caplog.text
    with pytest.raises(SetupError, match="STALLWATCH_FLEET_READER_TOKENS_DIR"):
        Readers(tokens / "missing", "0.0.0.0")


@pytest.mark.kafka
async def test_a_real_fleet_app_lists_a_tenants_incident_to_its_reader_alone(tokens: Path) -> None:
    settings = fresh_settings(partitions=1)
    fleet = FleetProcess(settings, env={"STALLWATCH_FLEET_READER_TOKENS_DIR": str(tokens)})
    now = float(int(time.time()))
    try:
        await fleet.serving()
        async with Tallies(settings) as tallies, Reader(settings, settings.incidents_topic) as incidents:
            for tenant in ("acme", "globex"):
                await tallies.send(
                    [
                        tally("search", now, tenant=tenant, runs=[f"r{i}"], calls=2, failures=2)
                        for i in range(5)
                    ]
                )
            await incidents.until(lambda vs: {v["tenant"] for v in vs} >= {"acme", "globex"})
        status, body = await get(fleet.web_port, "/incidents/acme/", ACME)
        assert status == 200 and tenants_of(body) == {"acme"}
        for path, token in [("/incidents/globex/", ACME), ("/incidents/", ACME), ("/incidents/acme/", None)]:
            assert (await get(fleet.web_port, path, token))[0] == 401, (path, token)
        assert fleet.open_incidents("acme") == [], "the harness's own reads carry no token: refused"
    finally:
        fleet.stop()
