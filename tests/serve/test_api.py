"""The HTTP API over real HTTP on a loopback port: the client's calls, their errors, the token."""

from __future__ import annotations

import asyncio

import pytest

from stallwatch.serve.main import ServeOptions, serve, token_for
from stallwatch.settings import Settings, SetupError


async def _start(server, run_id="r1", **extra):
    status, body = await server.post(
        "/v1/runs", {"run_id": run_id, "mode": "researcher", "tools": [{"name": "search"}], **extra}
    )
    assert status == 201, body
    return body


async def test_a_repeated_call_is_refused_with_stallwatchs_words(server):
    started = await _start(server)
    assert "refused" in started["system_prompt"]
    await server.post("/v1/runs/r1/rounds")
    status, first = await server.post("/v1/runs/r1/calls", {"tool": "search", "args": {"q": "kafka"}})
    assert status == 200 and first["allowed"] is True and first["code"] is None
    status, view = await server.post(
        "/v1/runs/r1/results", {"call_id": first["call_id"], "tool": "search", "result": ["a", "b"]}
    )
    assert status == 200 and view["round"] == 1 and view["stop"] is None
    status, again = await server.post("/v1/runs/r1/calls", {"tool": "search", "args": {"q": "kafka"}})
    assert again["allowed"] is False and again["code"] == "duplicate_call"
    assert "search" in again["reason"]
    status, view = await server.post("/v1/runs/r1/rounds/end")
    assert status == 200
    status, view = await server.post("/v1/runs/r1/end", {"reason": "done"})
    assert status == 200
    status, body = await server.get("/v1/runs/r1")
    assert status == 404 and "POST /v1/runs" in body["error"]


async def test_rounds_of_refused_calls_stop_the_run_and_say_so(server):
    await _start(server)
    await server.post("/v1/runs/r1/rounds")
    _, first = await server.post("/v1/runs/r1/calls", {"tool": "search", "args": {"q": "x"}})
    await server.post("/v1/runs/r1/results", {"call_id": first["call_id"], "tool": "search", "result": 1})
    view = None
    for _ in range(8):
        await server.post("/v1/runs/r1/rounds/end")
        _, view = await server.post("/v1/runs/r1/rounds")
        if view["stop"]:
            break
        await server.post("/v1/runs/r1/calls", {"tool": "search", "args": {"q": "x"}})
    _, view = await server.get("/v1/runs/r1")
    assert view["stop"] is not None and view["stop"]["reason"]
    _, after = await server.post("/v1/runs/r1/calls", {"tool": "search", "args": {"q": "new"}})
    assert after["allowed"] is False and after["stop"]["code"] == view["stop"]["code"]


async def test_bad_requests_get_one_line_naming_the_field(server):
    status, body = await server.post("/v1/runs", {"mode": "coder"})
    assert status == 400 and body["error"].startswith("run_id:") and "\n" not in body["error"]
    status, body = await server.post("/v1/runs", {"run_id": "r", "mode": "nonsense"})
    assert status == 400 and "mode" in body["error"] and "\n" not in body["error"]
    await _start(server)
    status, body = await server.post("/v1/runs", {"run_id": "r1"})
    assert status == 409
    status, body = await server.post("/v1/runs/r1/calls", {"tool": "search", "effect": "delete"})
    assert status == 400 and body["error"].startswith("effect:")
    status, body = await server.post("/v1/runs/nope/calls", {"tool": "search"})
    assert status == 404


async def test_concurrent_proposals_for_one_run_are_answered_one_at_a_time(server):
    """Twenty identical calls at once: exactly one is allowed, the others are its repeats."""
    await _start(server)
    await server.post("/v1/runs/r1/rounds")
    answers = await asyncio.gather(
        *(server.post("/v1/runs/r1/calls", {"tool": "search", "args": {"q": 1}}) for _ in range(20))
    )
    allowed = [a for _, a in answers if a["allowed"]]
    assert len(allowed) == 1
    assert len({a["call_id"] for _, a in answers}) == 20


async def test_a_token_is_required_when_set(make_server):
    async with make_server(token="s3cret-token-for-tests") as server:
        status, body = await server.post("/v1/runs", {"run_id": "r1"})
        assert status == 401 and "Authorization: Bearer" in body["error"]
        status, _ = await server.post("/v1/runs", {"run_id": "r1"}, Authorization="Bearer wrong")
        assert status == 401
        status, _ = await server.post(
            "/v1/runs", {"run_id": "r1"}, Authorization="Bearer s3cret-token-for-tests"
        )
        assert status == 201
        status, _ = await server.get("/v1/health")
        assert status == 200


def test_binding_beyond_loopback_needs_a_token(monkeypatch):
    monkeypatch.delenv("STALLWATCH_SERVE_TOKEN", raising=False)
    assert token_for("127.0.0.1") is None
    assert token_for("::1") is None
    with pytest.raises(SetupError, match="STALLWATCH_SERVE_TOKEN"):
        token_for("0.0.0.0")
    monkeypatch.setenv("STALLWATCH_SERVE_TOKEN", "abc")
    assert token_for("0.0.0.0") == "abc"


async def test_serve_listens_and_answers_until_cancelled():
    import aiohttp

    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(ServeOptions(port=0), Settings(), bound.set_result))
    port = await asyncio.wait_for(bound, 10)
    try:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/v1/health") as r:
            assert r.status == 200 and (await r.json())["status"] == "ok"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def _raw(server, method: str, path: str, data: bytes | None = None, **headers: str):
    async with server.http.request(method, server.url + path, data=data, headers=headers) as response:
        return response.status, await response.json()


START = b'{"run_id": "web", "mode": "coder"}'


async def test_a_web_page_cannot_post_a_simple_cross_origin_request(server):
    """A page can POST text/plain anywhere without a preflight: the body must be JSON by type."""
    status, body = await _raw(server, "POST", "/v1/runs", START, **{"Content-Type": "text/plain"})
    assert status == 415 and "application/json" in body["error"] and "\n" not in body["error"]
    status, _ = await _raw(server, "POST", "/hooks/claude", START, **{"Content-Type": "text/plain"})
    assert status == 415
    assert "web" not in server.service.held
    status, _ = await _raw(server, "POST", "/v1/runs", START, **{"Content-Type": "application/json"})
    assert status == 201


async def test_requests_from_browsers_are_refused(server):
    """Browsers name the page's origin on every cross-origin request and every POST; agents' hooks
    and local clients send no Origin."""
    json_type = {"Content-Type": "application/json"}
    status, body = await _raw(server, "POST", "/v1/runs", START, Origin="https://evil.example", **json_type)
    assert status == 403 and "Origin" in body["error"]
    status, _ = await _raw(server, "GET", "/v1/health", Origin="null")
    assert status == 403
    assert "web" not in server.service.held


async def test_only_loopback_host_names_are_answered_without_a_token(server, make_server):
    """DNS rebinding: a page at evil.example whose name now resolves to 127.0.0.1 reaches the
    server as the same origin, with its own name in Host."""
    port = server.url.rsplit(":", 1)[1]
    status, body = await _raw(server, "GET", "/v1/health", Host=f"evil.example:{port}")
    assert status == 403 and "Host" in body["error"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost", "[::1]"):
        status, _ = await _raw(server, "GET", "/v1/health", Host=host)
        assert status == 200, host
    async with make_server(token="s3cret-token-for-tests") as guarded:
        status, _ = await _raw(
            guarded,
            "GET",
            "/v1/runs/x",
            Host="stallwatch.internal:8737",
            Authorization="Bearer s3cret-token-for-tests",
        )
        assert status == 404  # past the Host check: the token is what guards it


async def test_reading_a_run_leaves_its_nudges_unread(server):
    """GET is read-only: the nudges stay for the next POST's answer, which marks them read."""
    await _start(
        server,
        "n1",
        mode="coder",
        policy={"stall_nudge_at": 2},
        tools=[{"name": "run_tests", "effect": "unknown"}, {"name": "edit", "effect": "write"}],
    )
    for i in range(4):
        await server.post("/v1/runs/n1/rounds")
        _, run = await server.post("/v1/runs/n1/calls", {"tool": "run_tests", "args": {}})
        await server.post(
            "/v1/runs/n1/results", {"call_id": run["call_id"], "tool": "run_tests", "result": "1 failed"}
        )
        _, edit = await server.post("/v1/runs/n1/calls", {"tool": "edit", "args": {"v": i}})
        await server.post("/v1/runs/n1/results", {"call_id": edit["call_id"], "tool": "edit", "result": i})
        await server.post("/v1/runs/n1/rounds/end")
        held = server.service.held["n1"]
        if held.run.nudges:
            break
    held.nudges_read = 0  # whatever the POSTs' answers carried: unread again
    _, first = await server.get("/v1/runs/n1")
    _, second = await server.get("/v1/runs/n1")
    assert first["nudges"] and second["nudges"] == first["nudges"]
    _, posted = await server.post("/v1/runs/n1/rounds")
    assert posted["nudges"] == first["nudges"]
    _, after = await server.get("/v1/runs/n1")
    assert after["nudges"] == []
