"""The tenant of a run is the one its topic names: on a tenant's events topic an event naming
another tenant is refused, one naming none is the topic's; replay of a tenant's log
(STALLWATCH_TENANT) decides as the worker's batch step on that tenant's topic does."""

from __future__ import annotations

import io

import orjson
import pytest

from stallwatch.cli.replay import replay
from stallwatch.cli.replay_engine import ReplayEngine
from stallwatch.contract.advisories import advisory_key, signed
from stallwatch.contract.commands import encode_command
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.quota import LiveRuns, RunQuota
from stallwatch.settings import Settings, SetupError, tenant_of_events_topic
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from stallwatch_streams.worker.tallies import Tallies
from tests.engine.test_fleet_advisory import advisory
from tests.script import RunScript

KEY = advisory_key("the fleet app's own advisory key")
MISMATCH = "the event names another tenant than its topic's (acme)"


def looping(run_id: str, tenant: str | None = None) -> RunScript:
    """A run that repeats one search: refused at the second round."""
    run = RunScript(run_id)
    if tenant is not None:
        run.events[0]["tenant"] = tenant
    for _ in range(3):
        run.round_of(("search", {"q": "same"}, {"docs": [1]}))
    return run


def replayed(lines: list[bytes], tenant: str | None) -> tuple[list[dict], list[dict]]:
    out, err = io.BytesIO(), io.BytesIO()
    replay(
        io.BytesIO(b"\n".join(lines) + b"\n"), out, err, engine=ReplayEngine(advisory_key=KEY, tenant=tenant)
    )
    return (
        [orjson.loads(x) for x in out.getvalue().splitlines()],
        [orjson.loads(x) for x in err.getvalue().splitlines()],
    )


def batch(
    lines: list[bytes], tenant: str | None, live: LiveRuns | None = None, tallies: Tallies | None = None
):
    applier = BatchApplier(Detector(advisory_key=KEY), "t", tenant=tenant, tallies=tallies)
    messages = [
        SourceMessage(orjson.loads(line)["run_id"].encode(), line, 0, offset)
        for offset, line in enumerate(lines)
    ]
    return applier.apply(messages, lambda _: None, PartitionClock(), 0.0, live)


def test_a_run_naming_another_tenant_on_a_tenants_topic_is_refused_and_its_calls_fail_open():
    commands, letters = replayed(looping("r1", tenant="globex").lines(), tenant="acme")
    assert [letter["error"].split(";")[0] for letter in letters] == [MISMATCH]
    assert "globex" not in letters[0]["error"]  # the sender's text is not quoted back
    verdicts = [c for c in commands if c["type"] == "verdict"]
    assert verdicts and {v["decision"] for v in verdicts} == {"allow"}  # no record: fail open


@pytest.mark.parametrize("named", [None, "acme"])
def test_a_run_naming_none_or_its_own_tenant_is_judged_as_that_tenants(named):
    commands, letters = replayed(looping("r1", tenant=named).lines(), tenant="acme")
    assert letters == []
    assert commands == replayed(looping("r1").lines(), tenant=None)[0]
    assert any(c.get("code") == "duplicate_call" for c in commands)


def test_the_tenant_comes_from_the_topic_for_quotas_and_the_fleets_tallies():
    live, tallies = LiveRuns(RunQuota(per_tenant=1, total=10)), Tallies(None)
    result = batch([*looping("r1").lines(), *looping("r2").lines()], "acme", live, tallies)
    assert [reason for _, _, reason in result.letters] == ["run_quota"]  # acme's one place
    assert live.by_tenant == {"acme": 1}
    assert {orjson.loads(value)["tenant"] for _, value in result.tallies} == {"acme"}


def test_an_advisory_for_another_tenant_is_refused_on_a_tenants_topic():
    run = RunScript("mine", policy={"fleet_breaker": True})
    run.round_of(("search", {"q": 1}, {"docs": [1]}))
    theirs = signed({**advisory("mine"), "tenant": "globex"}, KEY)
    ours = signed({**advisory("mine", incident_id="inc-2"), "tenant": "acme"}, KEY)
    commands, letters = replayed([*run.lines(), orjson.dumps(theirs), orjson.dumps(ours)], "acme")
    assert [letter["error"].split(";")[0] for letter in letters] == [MISMATCH]
    assert [c["detail"]["incident_id"] for c in commands if c["type"] == "nudge"] == ["inc-2"]


def test_replay_of_a_tenants_log_decides_as_the_batch_step_on_its_topic():
    lines = [
        *looping("r1", tenant="globex").lines(),
        *looping("r2").lines(),
        *looping("r3", tenant="acme").lines(),
    ]
    expected, letters = replayed(lines, "acme")
    result = batch(lines, "acme")
    assert [orjson.loads(encode_command(c)) for c in result.commands] == expected
    assert [reason for _, _, reason in result.letters] == ["tenant_mismatch"]
    assert [orjson.loads(letter)["error"] for _, letter, _ in result.letters] == [x["error"] for x in letters]


def test_a_tenants_topics_and_group_are_named_from_the_prefix_and_the_tenant():
    shared = Settings(topic_prefix="sw")
    acme = shared.for_tenant("acme")
    assert (shared.events_topic, shared.commands_topic, shared.group_id) == (
        "sw.events",
        "sw.commands",
        "sw-detector",
    )
    assert (
        acme.events_topic,
        acme.commands_topic,
        acme.deadletter_topic,
        acme.changelog_topic,
        acme.group_id,
    ) == (
        "sw.tenant.acme.events",
        "sw.tenant.acme.commands",
        "sw.tenant.acme.deadletter",
        "sw.tenant.acme.runs-changelog",
        "sw-detector.tenant.acme",
    )
    # The stream jobs' own topics stay shared: the fleet app sees every tenant.
    assert (acme.tallies_topic, acme.incidents_topic) == ("sw.tallies", "sw.incidents")
    assert tenant_of_events_topic("sw", acme.events_topic) == "acme"
    for other in (
        "sw.events",
        "sw.tenant.acme.commands",
        "sw.tenant.a.b.events",
        "other.tenant.acme.events",
        "sw.tenant..events",
    ):
        assert tenant_of_events_topic("sw", other) is None


@pytest.mark.parametrize("name", ["a.b", "", "x" * 65, "sp ace", "ü"])
def test_a_tenant_name_that_cannot_name_a_topic_is_one_line(name):
    with pytest.raises(SetupError, match="STALLWATCH_TENANT"):
        Settings(tenant=name)
