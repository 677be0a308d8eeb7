"""Metric bookkeeping for every command type, without a broker."""

from __future__ import annotations

from stallwatch.streams.metrics import WorkerMetrics

from stallwatch.contract.commands import Nudge, Stop, Verdict


def value(metrics: WorkerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_every_command_type_is_counted():
    m = WorkerMetrics()
    base = {"command_id": "c", "run_id": "r", "caused_by": "e", "round": 3}
    m.count_commands([
        Verdict(**base, call_id="x", decision="allow", code=None, reason="Allowed."),
        Verdict(**base, call_id="y", decision="refuse", code="duplicate_call", reason="..."),
        Nudge(**base, reason="...", detail={"already_seen_streak": 3}),
        Stop(**base, code="no_new_facts", action="answer_without_tools", reason="...",
             detail={"already_seen_streak": 5, "all_refused_streak": 0}),
    ])
    assert value(m, "stallwatch_verdicts_total", decision="allow", code="none") == 1
    assert value(m, "stallwatch_verdicts_total", decision="refuse", code="duplicate_call") == 1
    assert value(m, "stallwatch_nudges_total") == 1
    assert value(m, "stallwatch_stops_total", code="no_new_facts") == 1
    assert value(m, "stallwatch_streak_length_at_stop_sum", code="no_new_facts") == 5
