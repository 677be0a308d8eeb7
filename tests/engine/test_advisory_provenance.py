"""Only the fleet app advises: with STALLWATCH_ADVISORY_KEY set, an advisory counts only with the
fleet app's MAC, in replay and the worker's batch step alike; and an advisory of another
tenant's incident never touches a run."""

from __future__ import annotations

import io

import orjson
import pytest

from stallwatch.cli.replay import replay
from stallwatch.cli.replay_engine import ReplayEngine
from stallwatch.contract.advisories import advisory_key, signed, verified
from stallwatch.contract.commands import encode_command
from stallwatch.engine.detector import Detector
from stallwatch.engine.expiry import PartitionClock
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from tests.cli.test_replay_fleet_advisory import log_with_advisories
from tests.engine.test_fleet_advisory import advisory
from tests.script import RunScript

KEY = advisory_key("the fleet app's own advisory key")


def replayed(
    lines: list[bytes], key: bytes | None = KEY, tenant: str | None = None
) -> tuple[list[dict], list[dict]]:
    out, err = io.BytesIO(), io.BytesIO()
    engine = ReplayEngine(advisory_key=key, tenant=tenant)
    replay(io.BytesIO(b"\n".join(lines) + b"\n"), out, err, engine=engine)
    return (
        [orjson.loads(x) for x in out.getvalue().splitlines()],
        [orjson.loads(x) for x in err.getvalue().splitlines()],
    )


def resigned(lines: list[bytes], key: bytes) -> list[bytes]:
    """The log with every advisory signed under `key`, as the fleet app writes them."""
    out = []
    for line in lines:
        event = orjson.loads(line)
        out.append(orjson.dumps(signed(event, key)) if event["type"] == "fleet_advisory" else line)
    return out


def without_advisories(lines: list[bytes]) -> list[bytes]:
    return [line for line in lines if orjson.loads(line)["type"] != "fleet_advisory"]


def test_signed_advisories_decide_as_an_unkeyed_deployment_does():
    lines = log_with_advisories()
    unkeyed, _ = replayed(lines, key=None)
    keyed, letters = replayed(resigned(lines, KEY))
    assert keyed == unkeyed and letters == []
    assert any(c["type"] == "nudge" for c in keyed)


@pytest.mark.parametrize("forge", ["unsigned", "another key", "content changed"])
def test_an_advisory_from_anyone_but_the_fleet_app_changes_no_decision(forge):
    lines = log_with_advisories()
    if forge == "unsigned":
        forged = lines
    elif forge == "another key":
        forged = resigned(lines, advisory_key("a tenant's guess at the key!"))
    else:  # a signed advisory, its tool changed after signing
        forged = []
        for line in resigned(lines, KEY):
            event = orjson.loads(line)
            if event["type"] == "fleet_advisory":
                event["tool"] = "fetch"
            forged.append(orjson.dumps(event))
    commands, letters = replayed(forged)
    assert commands == replayed(without_advisories(lines))[0]
    assert letters and {letter["error"] for letter in letters} == {
        "a fleet_advisory without the fleet app's MAC: only the fleet app, holding "
        "STALLWATCH_ADVISORY_KEY, advises a run"
    }


def test_a_forged_close_cannot_lift_a_real_breaker():
    breaker = RunScript("breaker", policy={"fleet_breaker": True})
    breaker.round_of(("search", {"q": 1}, {"docs": [1]}))
    lines = [
        *breaker.lines(),
        orjson.dumps(signed(advisory("breaker"), KEY)),
        orjson.dumps(advisory("breaker", incident="closed")),
    ]  # the close is forged
    breaker.start_round()
    breaker.call("search", {"q": 2})
    commands, letters = replayed(lines + breaker.lines()[-2:])
    assert [c["code"] for c in commands if c["type"] == "verdict"][-1] == "fleet_incident"
    assert len(letters) == 1


def test_the_batch_step_checks_the_mac_as_replay_does():
    lines = log_with_advisories()
    forged = [*resigned(lines[:7], KEY), *lines[7:]]  # the later advisories unsigned
    expected, letters = replayed(forged)
    result = BatchApplier(Detector(advisory_key=KEY), "stallwatch.events").apply(
        [SourceMessage(orjson.loads(line)["run_id"].encode(), line, 0, i) for i, line in enumerate(forged)],
        lambda _: None,
        PartitionClock(),
        0.0,
    )
    assert [orjson.loads(encode_command(c)) for c in result.commands] == expected
    assert [reason for _, _, reason in result.letters] == ["unsigned_advisory"] * len(letters)


def test_an_advisory_of_another_tenants_incident_touches_no_run():
    run = RunScript("mine", policy={"fleet_breaker": True})  # on acme's topic
    run.round_of(("search", {"q": 1}, {"docs": [1]}))
    theirs = signed({**advisory("mine"), "tenant": "globex"}, KEY)
    ours = signed({**advisory("mine", incident_id="inc-2"), "tenant": "acme"}, KEY)
    commands, letters = replayed([*run.lines(), orjson.dumps(theirs)], tenant="acme")
    assert not [c for c in commands if c["type"] == "nudge"]
    assert [letter["error"].split(" (")[0] for letter in letters] == [
        "the event names another tenant than its topic's"
    ]
    commands, _ = replayed([*run.lines(), orjson.dumps(ours)], tenant="acme")
    assert [c["detail"]["incident_id"] for c in commands if c["type"] == "nudge"] == ["inc-2"]


def test_a_mac_is_checked_on_the_content_as_written():
    event = signed(advisory("r"), KEY)
    assert verified(event, KEY)
    assert not verified({**event, "mac": event["mac"].upper()}, KEY)
    assert not verified({**event, "mac": 7}, KEY)
    assert not verified({**event, "window_s": 61.0}, KEY)
