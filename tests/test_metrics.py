"""Metric bookkeeping for every command type, without a broker."""

from __future__ import annotations

from stallwatch.contract.commands import Nudge, Stop, Verdict
from stallwatch_streams.metrics import StallwatchMetrics


def value(metrics: StallwatchMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_every_command_type_is_counted():
    m = StallwatchMetrics()
    base = {"command_id": "c", "run_id": "r", "caused_by": "e", "round": 3}
    m.count_commands(
        [
            Verdict(**base, call_id="x", decision="allow", code=None, reason="Allowed."),
            Verdict(**base, call_id="y", decision="refuse", code="duplicate_call", reason="..."),
            Nudge(**base, reason="...", detail={"already_seen_streak": 3}),
            Stop(
                **base,
                code="no_new_facts",
                action="answer_without_tools",
                reason="...",
                detail={"already_seen_streak": 5, "all_refused_streak": 0},
            ),
        ]
    )
    assert value(m, "stallwatch_verdicts_total", decision="allow", code="none") == 1
    assert value(m, "stallwatch_verdicts_total", decision="refuse", code="duplicate_call") == 1
    assert value(m, "stallwatch_nudges_total") == 1
    assert value(m, "stallwatch_stops_total", code="no_new_facts") == 1
    assert value(m, "stallwatch_streak_length_at_stop_sum", code="no_new_facts") == 5


def test_the_in_process_engine_keeps_the_same_counters_when_asked():
    from collections import Counter

    import orjson

    from stallwatch.engine.embedded import EmbeddedEngine, Rejected
    from tests.script import RunScript

    s = RunScript()
    for i in range(8):
        s.round_of(("search", {"q": i}, {"docs": [1]}))
    lines = [*s.lines(), b"garbage"]
    m = StallwatchMetrics()
    results = list(EmbeddedEngine(metrics=m).replay(lines))
    commands = [c for r in results if not isinstance(r, Rejected) for c in r]
    for kind, count in Counter(orjson.loads(line)["type"] for line in s.lines()).items():
        assert value(m, "stallwatch_events_consumed_total", type=kind) == count
    assert value(m, "stallwatch_verdicts_total", decision="allow", code="none") == 6
    assert value(m, "stallwatch_verdicts_total", decision="refuse", code="run_stopped") == 2
    assert value(m, "stallwatch_stops_total", code="no_new_facts") == 1
    assert value(m, "stallwatch_nudges_total") == 1
    assert value(m, "stallwatch_dead_letters_total", reason="malformed_json") == 1
    assert len(commands) == 10
    # Without metrics, the same commands come out of the lean path.
    lean = [c for r in EmbeddedEngine().replay(lines) if not isinstance(r, Rejected) for c in r]
    assert lean == commands


def test_coder_stall_nudges_and_workspace_versions_at_stops_are_counted():
    m = StallwatchMetrics()
    base = {"command_id": "c", "run_id": "r", "caused_by": "e", "round": 3}
    m.count_commands(
        [
            Nudge(**base, reason="...", detail={"call": "pytest", "same_result_runs": 3}),
            Stop(
                **base,
                code="no_effect",
                action="answer_without_tools",
                reason="...",
                detail={"call": "pytest", "same_result_runs": 4, "workspace_version": 12},
            ),
        ]
    )
    assert value(m, "stallwatch_nudges_total") == 1
    assert value(m, "stallwatch_stall_nudges_total") == 1
    assert value(m, "stallwatch_stops_total", code="no_effect") == 1
    assert value(m, "stallwatch_streak_length_at_stop_sum", code="no_effect") == 4
    assert value(m, "stallwatch_workspace_version_at_stop_sum", code="no_effect") == 12
