"""The shared events topic is one tenant's, the deployment's own: a principal that may write it
(one team) cannot speak for another tenant there. Five failing runs labelled `tenant: "acme"`
and an advisory naming acme, written to the shared topic, become dead letters: no tally of acme's
for the fleet app, no live run counted against acme's quota, nothing of acme's run changed."""

from __future__ import annotations

import orjson

from stallwatch.contract.advisories import advisory_key, signed
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.quota import LiveRuns, RunQuota
from stallwatch.engine.state import RunState
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from stallwatch_streams.worker.tallies import Tallies
from tests.engine.test_fleet_advisory import advisory
from tests.script import RunScript

KEY = advisory_key("the fleet app's own advisory key")


def messages(lines: list[bytes]) -> list[SourceMessage]:
    return [SourceMessage(orjson.loads(line)["run_id"].encode(), line, 0, i) for i, line in enumerate(lines)]


def forged_runs() -> list[bytes]:
    lines = []
    for n in range(5):
        s = RunScript(f"forged-{n}")
        s.events[0]["tenant"] = "acme"
        for _ in range(3):
            s.start_round()
            s.call("search", {"q": n}, status="error", result={"error": "503"})
            s.end_round()
        lines += s.lines()
    return lines


def test_events_naming_a_tenant_on_the_shared_topic_are_dead_letters_and_tally_nothing_of_it():
    live = LiveRuns(RunQuota(per_tenant=3, total=100))
    applier = BatchApplier(Detector(advisory_key=KEY), "stallwatch.events", tallies=Tallies())
    forged_advisory = orjson.dumps(signed({**advisory("acme-run"), "tenant": "acme"}, KEY))
    result = applier.apply(
        messages([*forged_runs(), forged_advisory]), lambda _: None, PartitionClock(), 0.0, live
    )
    reasons = [reason for _, _, reason in result.letters]
    assert reasons == ["tenant_on_shared_topic"] * 6
    errors = [orjson.loads(letter)["error"] for _, letter, _ in result.letters]
    assert all("acme" not in error for error in errors), "the sender's text is not quoted back"
    assert result.states == {} and live.by_tenant == {}
    assert not [key for key, _ in result.tallies if key.startswith(b"acme\x1f")]


def test_acmes_own_run_on_its_topic_is_untouched_by_the_forgery():
    def acme_run() -> RunScript:
        s = RunScript("acme-run", policy={"fleet_breaker": True})
        s.round_of(("search", {"q": 1}, {"docs": [1]}))
        s.start_round()
        s.call("search", {"q": 2})
        return s

    acme = BatchApplier(Detector(advisory_key=KEY), "stallwatch.tenant.acme.events", tenant="acme")
    shared = BatchApplier(Detector(advisory_key=KEY), "stallwatch.events", tallies=Tallies())
    alone = acme.apply(messages(acme_run().lines()), lambda _: None, PartitionClock(), 0.0)
    shared.apply(messages(forged_runs()), lambda _: None, PartitionClock(), 0.0)
    after = acme.apply(messages(acme_run().lines()), lambda _: None, PartitionClock(), 0.0)
    assert after.commands == alone.commands
    assert [c.decision for c in after.commands if c.type == "verdict"][-1] == "allow"
    state: RunState = after.states["acme-run"]
    assert state.tenant == "acme"


def test_a_run_naming_no_tenant_on_the_shared_topic_is_judged_as_before():
    s = RunScript("team-run")
    s.round_of(("search", {"q": 1}, {"docs": [1]}))
    result = BatchApplier(Detector(), "stallwatch.events").apply(
        messages(s.lines()), lambda _: None, PartitionClock(), 0.0
    )
    assert result.letters == [] and result.states["team-run"].tenant is None
