"""Grafana dashboards as code (grafana-foundation-sdk): `make dashboards` writes their JSON.

Two dashboards: the fleet overview and a per-worker view. tests/deploy checks the JSON is what
this file builds and that every query names metrics the worker exports.
"""

from __future__ import annotations

import json
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

OUT = Path(__file__).parent / "dashboards"
PROMETHEUS = DataSourceRef(type_val="prometheus", uid="prometheus")


def query(expr: str, legend: str = "") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).datasource(PROMETHEUS)


def series(title: str, unit: str, *queries: prometheus.Dataquery, width: int = 12) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).height(8).span(width).datasource(PROMETHEUS)
    for i, q in enumerate(queries):
        panel = panel.with_target(q.ref_id(chr(ord("A") + i)))
    return panel


def number(title: str, unit: str, expr: str) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .unit(unit)
        .height(4)
        .span(6)
        .datasource(PROMETHEUS)
        .with_target(query(expr).ref_id("A"))
    )


def fleet_overview() -> dashboard.Dashboard:
    return (
        dashboard.Dashboard("stallwatch: fleet overview")
        .uid("stallwatch-fleet")
        .tags(["stallwatch"])
        .refresh("30s")
        .time("now-3h", "now")
        .with_panel(number("Events/s", "ops", "sum(rate(stallwatch_events_consumed_total[5m]))"))
        .with_panel(number("Active runs", "short", "sum(stallwatch_active_runs)"))
        .with_panel(number("Stops/min", "short", "sum(rate(stallwatch_stops_total[5m])) * 60"))
        .with_panel(number("Dead letters/min", "short", "sum(rate(stallwatch_dead_letters_total[5m])) * 60"))
        .with_panel(number("Open fleet incidents", "short", "sum(stallwatch_fleet_incidents_open)"))
        .with_panel(
            series(
                "Fleet incidents open, by kind (stallwatch fleet)",
                "short",
                query("sum by (kind) (stallwatch_fleet_incidents_open)", "{{kind}}"),
                query("sum(rate(stallwatch_fleet_advisories_total[5m])) * 60", "advisories/min"),
            )
        )
        .with_panel(
            series(
                "Events by type",
                "ops",
                query("sum by (type) (rate(stallwatch_events_consumed_total[5m]))", "{{type}}"),
            )
        )
        .with_panel(
            series(
                "Verdicts by decision and code",
                "ops",
                query(
                    "sum by (decision, code) (rate(stallwatch_verdicts_total[5m]))", "{{decision}} {{code}}"
                ),
            )
        )
        .with_panel(
            series(
                "Stops by code",
                "ops",
                query("sum by (code) (rate(stallwatch_stops_total[5m]))", "{{code}}"),
                query("sum(rate(stallwatch_nudges_total[5m]))", "nudges"),
            )
        )
        .with_panel(
            series(
                "Observe-only: would-have refusals and stops per tenant and tool (/min)",
                "short",
                query(
                    "sum by (tenant, tool) (rate(stallwatch_would_refusals_total[5m])) * 60",
                    "refusals {{tenant}} {{tool}}",
                ),
                query(
                    "sum by (tenant, tool, code) (rate(stallwatch_would_stops_total[5m])) * 60",
                    "stops {{tenant}} {{tool}} {{code}}",
                ),
            )
        )
        .with_panel(
            series(
                "Decision latency (event time to command acked)",
                "s",
                *[
                    query(
                        f"histogram_quantile({q}, sum by (le) "
                        f"(rate(stallwatch_decision_latency_seconds_bucket[5m])))",
                        f"p{p}",
                    )
                    for q, p in ((0.5, 50), (0.9, 90), (0.99, 99))
                ],
            )
        )
        .with_panel(
            series(
                "Consumer lag by partition",
                "short",
                query("sum by (partition) (stallwatch_consumer_lag)", "partition {{partition}}"),
            )
        )
        .with_panel(
            series(
                "Dead letters by reason",
                "ops",
                query("sum by (reason) (rate(stallwatch_dead_letters_total[5m]))", "{{reason}}"),
            )
        )
        .with_panel(
            series(
                "CPU applying each tenant's events",
                "percentunit",
                query("sum by (tenant) (rate(stallwatch_apply_cpu_seconds_total[5m]))", "{{tenant}}"),
            )
        )
        .with_panel(
            series(
                "Memory per tenant, estimated: live run states and fleet keys",
                "bytes",
                query("sum by (tenant) (stallwatch_live_state_bytes)", "runs {{tenant}}"),
                query("sum by (tenant) (stallwatch_fleet_state_bytes)", "fleet keys {{tenant}}"),
            )
        )
        .with_panel(
            series(
                "Streak length at stop (p90)",
                "short",
                query(
                    "histogram_quantile(0.9, sum by (le, code) "
                    "(rate(stallwatch_streak_length_at_stop_bucket[1h])))",
                    "{{code}}",
                ),
            )
        )
        .with_panel(
            series("Fingerprints held", "short", query("sum(stallwatch_fingerprints_held)", "fingerprints"))
        )
        .with_panel(
            series(
                "Coder: stall nudges (among all nudges)",
                "ops",
                query("sum(rate(stallwatch_stall_nudges_total[5m]))", "stall nudges"),
                query("sum(rate(stallwatch_nudges_total[5m]))", "all nudges"),
            )
        )
        .with_panel(
            series(
                "Coder: workspace version at stop (p50, p90)",
                "short",
                *[
                    query(
                        f"histogram_quantile({q}, sum by (le, code) "
                        f"(rate(stallwatch_workspace_version_at_stop_bucket[1h])))",
                        f"{{{{code}}}} p{p}",
                    )
                    for q, p in ((0.5, 50), (0.9, 90))
                ],
            )
        )
    )


def per_worker() -> dashboard.Dashboard:
    return (
        dashboard.Dashboard("stallwatch: per worker")
        .uid("stallwatch-worker")
        .tags(["stallwatch"])
        .refresh("30s")
        .time("now-3h", "now")
        .with_panel(series("Up", "short", query('up{job="stallwatch-worker"}', "{{instance}}")))
        .with_panel(
            series(
                "Events/s",
                "ops",
                query("sum by (instance) (rate(stallwatch_events_consumed_total[5m]))", "{{instance}}"),
            )
        )
        .with_panel(
            series(
                "Batch processing time (p99)",
                "s",
                query(
                    "histogram_quantile(0.99, sum by (le, instance) "
                    "(rate(stallwatch_batch_processing_seconds_bucket[5m])))",
                    "{{instance}}",
                ),
            )
        )
        .with_panel(
            series(
                "Fetch delay: events waiting in Kafka (p99)",
                "s",
                query(
                    "histogram_quantile(0.99, sum by (le, instance) "
                    "(rate(stallwatch_fetch_delay_seconds_bucket[5m])))",
                    "{{instance}}",
                ),
            )
        )
        .with_panel(
            series(
                "Event processing time (p50, p99)",
                "s",
                *[
                    query(
                        f"histogram_quantile({q}, sum by (le, instance) "
                        f"(rate(stallwatch_event_processing_seconds_bucket[5m])))",
                        f"{{{{instance}}}} p{p}",
                    )
                    for q, p in ((0.5, 50), (0.99, 99))
                ],
            )
        )
        .with_panel(
            series(
                "Events per batch (p50)",
                "short",
                query(
                    "histogram_quantile(0.5, sum by (le, instance) "
                    "(rate(stallwatch_batch_events_bucket[5m])))",
                    "{{instance}}",
                ),
            )
        )
        .with_panel(
            series(
                "Consumer lag", "short", query("sum by (instance) (stallwatch_consumer_lag)", "{{instance}}")
            )
        )
        .with_panel(
            series(
                "Active runs", "short", query("sum by (instance) (stallwatch_active_runs)", "{{instance}}")
            )
        )
        .with_panel(
            series(
                "Events skipped after a crash (already applied)",
                "ops",
                query("sum by (instance) (rate(stallwatch_events_skipped_total[5m]))", "{{instance}}"),
            )
        )
        .with_panel(
            series(
                "Table recovery after a rebalance (last hour, max)",
                "s",
                query(
                    "histogram_quantile(1, sum by (le, instance) "
                    "(rate(stallwatch_partition_restore_seconds_bucket[1h])))",
                    "{{instance}}",
                ),
            )
        )
        .with_panel(series("Version", "short", query("stallwatch_build_info", "{{instance}} {{version}}")))
    )


def render() -> dict[str, str]:
    """File name -> dashboard JSON."""
    encoder = JSONEncoder(sort_keys=True, indent=2)
    return {
        f"{board.build().uid}.json": encoder.encode(board.build()) + "\n"
        for board in (fleet_overview(), per_worker())
    }


def main() -> None:
    for name, text in render().items():
        (OUT / name).write_text(text)
        json.loads(text)
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
