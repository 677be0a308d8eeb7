"""Observe-only: every decision computed as usual, none acted on by a runtime that ignores the marker."""

from __future__ import annotations

import io
import subprocess
import sys

import orjson
from prometheus_client import generate_latest

from stallwatch.cli.explain import explain
from stallwatch.contract.commands import decode_command
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.embedded import EmbeddedEngine
from stallwatch_streams.metrics import StallwatchMetrics
from tests.script import RunScript


def looping_run(run_id: str = "looper", policy: dict | None = None, tenant: str | None = None) -> RunScript:
    """A researcher run that repeats one call (refused), then re-words a search that brings
    nothing new until the no-new-facts stop (round 7), and goes on for four more rounds."""
    s = RunScript(run_id, policy=policy)
    if tenant is not None:
        s.events[0]["tenant"] = tenant
    s.round_of(("search", {"q": "kafka"}, {"docs": [1]}))
    s.start_round()
    s.call("search", {"q": "kafka"}, status="ok", result={"docs": [1]})  # a duplicate
    s.end_round()
    for i in range(9):
        s.round_of(("search", {"q": f"wording {i}"}, {"docs": [1]}))
    s.end()
    return s


def decisions(engine: EmbeddedEngine, script: RunScript) -> list:
    out = []
    for event in script.events:
        out.extend(engine.handle(event))
    return out


def test_an_observed_run_gets_every_decision_as_what_would_have_happened():
    enforced = decisions(EmbeddedEngine(), looping_run())
    observed = decisions(EmbeddedEngine(), looping_run(policy={"observe_only": True}))
    assert len(observed) == len(enforced)
    # What a runtime acts on: every call allowed, no stop and no nudge.
    assert {c.type for c in observed} == {"verdict", "would_nudge", "would_stop"}
    assert all(c.decision == "allow" and c.code is None for c in observed if c.type == "verdict")
    # What would have happened: the enforced run's decisions, one for one, in the same rounds.
    for real, would in zip(enforced, observed, strict=True):
        assert (real.round, real.run_id, real.caused_by) == (would.round, would.run_id, would.caused_by)
        if real.type == "verdict":
            assert would.would_code == (real.code if real.decision == "refuse" else None)
            assert would.would_reason == (real.reason if real.decision == "refuse" else None)
        else:
            assert would.type == "would_" + real.type
            assert (would.reason, would.detail) == (real.reason, real.detail)
        # One id never carries two contents: a changed command has an id of its own.
        assert (would.command_id == real.command_id) == (would == real)
    stops = [(c.code, c.round) for c in enforced if c.type == "stop"]
    assert stops == [(c.code, c.round) for c in observed if c.type == "would_stop"] == [("no_new_facts", 7)]
    codes = [c.would_code for c in observed if c.type == "verdict" and c.would_code]
    assert codes == ["duplicate_call"] + ["run_stopped"] * 4  # rounds 8 to 11 ran all the same


def test_the_new_commands_round_trip_through_the_contract():
    for command in decisions(EmbeddedEngine(), looping_run(policy={"observe_only": True})):
        assert decode_command(orjson.dumps(command)) == command


def test_the_administrator_observes_a_tenant_or_the_deployment_and_a_run_cannot_opt_out():
    per_tenant = EmbeddedEngine(AdminPolicy(observe_only_tenants=frozenset({"acme"})))
    acme = decisions(per_tenant, looping_run("a", policy={"observe_only": False}, tenant="acme"))
    other = decisions(per_tenant, looping_run("b", tenant="globex"))
    assert "stop" not in {c.type for c in acme} and "would_stop" in {c.type for c in acme}
    assert "stop" in {c.type for c in other} and "would_stop" not in {c.type for c in other}
    everyone = EmbeddedEngine(AdminPolicy(observe_only=True))
    assert "would_stop" in {c.type for c in decisions(everyone, looping_run("c", tenant="globex"))}


def test_would_have_refusals_and_stops_are_counted_per_tenant_and_tool():
    metrics = StallwatchMetrics()
    engine = EmbeddedEngine(metrics=metrics)
    decisions(engine, looping_run(policy={"observe_only": True}, tenant="acme"))
    decisions(engine, looping_run("enforced", tenant="acme"))
    text = generate_latest(metrics.registry).decode()
    assert 'stallwatch_would_refusals_total{code="duplicate_call",tenant="acme",tool="search"} 1.0' in text
    assert 'stallwatch_would_refusals_total{code="run_stopped",tenant="acme",tool="search"} 4.0' in text
    assert 'stallwatch_would_stops_total{code="no_new_facts",tenant="acme",tool=""} 1.0' in text
    assert 'stallwatch_would_nudges_total{tenant="acme"} 1.0' in text
    # The enforced run's stop is a stop; the observed run's is not.
    assert 'stallwatch_stops_total{code="no_new_facts"} 1.0' in text


def test_made_up_tool_names_cannot_grow_the_would_have_counters_without_bound(monkeypatch):
    monkeypatch.setattr("stallwatch_streams.metrics.MAX_OBSERVED_LABELS", 3)
    metrics = StallwatchMetrics()
    engine = EmbeddedEngine(metrics=metrics)
    s = RunScript("flood", policy={"observe_only": True}, tools=[])
    s.start_round()
    for n in range(6):
        s.call(f"tool-{n}", {"q": 1}, status="ok", result={"x": 1})
        s.call(f"tool-{n}", {"q": 1})  # a duplicate: would be refused
    decisions(engine, s)
    text = generate_latest(metrics.registry).decode()
    assert text.count("stallwatch_would_refusals_total{") == 4  # three tools and `_other`
    assert 'stallwatch_would_refusals_total{code="duplicate_call",tenant="",tool="_other"} 3.0' in text


def test_explain_marks_what_would_have_happened():
    out = io.StringIO()
    assert explain("looper", looping_run(policy={"observe_only": True}).lines(), out)
    text = out.getvalue()
    assert (
        "round 2\n  would have refused search({'q': 'kafka'}) [duplicate_call] (observe-only, allowed):"
        in text
    )
    assert "  would have sent a nudge: Nothing new has come back for 3 rounds" in text
    assert "WOULD HAVE STOPPED (observe-only, the run went on) at round 7 [no_new_facts" in text
    assert "STOP at" not in text and "  refused" not in text


def test_replay_of_a_deployment_in_observe_only_runs_every_run_to_its_end(tmp_path):
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"\n".join(looping_run().lines()) + b"\n")
    done = subprocess.run(
        [sys.executable, "-m", "stallwatch.cli.main", "replay", str(log)],
        capture_output=True,
        timeout=120,
        check=False,
        env={"STALLWATCH_OBSERVE_ONLY": "true", "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    commands = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert [c["code"] for c in commands if c["type"] == "would_stop"] == ["no_new_facts"]
    assert not [c for c in commands if c["type"] == "stop" or c.get("decision") == "refuse"]
    assert sum(c["type"] == "verdict" for c in commands) == 11  # every call answered: allowed
