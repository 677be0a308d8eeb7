"""Observe-only through the HTTP API: every call runs; would-have refusals and stops shown, counted."""

from __future__ import annotations

from prometheus_client import generate_latest

from stallwatch.client import EmbeddedClient
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch_streams.metrics import StallwatchMetrics


async def _loop(server, run_id: str, rounds: int, **start) -> list[dict]:
    """A run that re-words one search for `rounds` rounds, each result one seen before, then
    repeats its first call; returns every verdict."""
    status, _ = await server.post(
        "/v1/runs", {"run_id": run_id, "mode": "researcher", "tools": [{"name": "search"}], **start}
    )
    assert status == 201
    verdicts = []
    for n in range(rounds):
        await server.post(f"/v1/runs/{run_id}/rounds")
        for args in ({"q": f"wording {n}"}, {"q": "wording 0"}):
            _, verdict = await server.post(f"/v1/runs/{run_id}/calls", {"tool": "search", "args": args})
            verdicts.append(verdict)
            if verdict["allowed"]:
                await server.post(
                    f"/v1/runs/{run_id}/results",
                    {"call_id": verdict["call_id"], "tool": "search", "result": {"docs": [1]}},
                )
        await server.post(f"/v1/runs/{run_id}/rounds/end")
    return verdicts


async def test_an_observed_run_runs_to_its_end_with_its_would_have_stop_shown_and_counted(make_server):
    metrics = StallwatchMetrics()
    client = EmbeddedClient(AdminPolicy(observe_only_tenants=frozenset({"acme"})), metrics=metrics)
    async with client, make_server(client=client) as server:
        verdicts = await _loop(server, "watched", 10, tenant="acme")
        assert all(v["allowed"] and v["code"] is None and v["stop"] is None for v in verdicts)
        would = [v["would_code"] for v in verdicts]
        assert would[:2] == [None, "duplicate_call"] and would[-1] == "run_stopped"
        assert verdicts[1]["would_reason"].startswith("Refused: this exact call")
        _, view = await server.get("/v1/runs/watched")
        assert view["stop"] is None and view["nudges"] == []
        assert view["would_stop"]["code"] == "no_new_facts"
        # The same loop of another tenant is stopped.
        enforced = await _loop(server, "guarded", 10, tenant="globex")
        assert enforced[1]["allowed"] is False and enforced[-1]["code"] == "run_stopped"
        _, view = await server.get("/v1/runs/guarded")
        assert view["stop"]["code"] == "no_new_facts" and view["would_stop"] is None
    text = generate_latest(metrics.registry).decode()
    assert 'stallwatch_would_stops_total{code="no_new_facts",tenant="acme",tool=""} 1.0' in text
    assert 'stallwatch_would_refusals_total{code="duplicate_call",tenant="acme",tool="search"}' in text
    observed = [line for line in text.splitlines() if line.startswith("stallwatch_would_")]
    assert observed and not [line for line in observed if 'tenant="globex"' in line]
