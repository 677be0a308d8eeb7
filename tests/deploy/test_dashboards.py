"""The Grafana dashboards: generated from deploy/grafana/build.py, querying real metrics only."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from stallwatch_streams.fleet.metrics import FleetMetrics
from stallwatch_streams.metrics import StallwatchMetrics

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
_HISTOGRAM_SERIES = re.compile(r"_(bucket|sum|count)$")


def build_module():
    spec = importlib.util.spec_from_file_location("grafana_build", GRAFANA / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def exported_metrics() -> set[str]:
    names = set()
    families = [*StallwatchMetrics().registry.collect(), *FleetMetrics().registry.collect()]
    for family in families:
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "histogram":
            names.update(f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        if family.type == "counter":  # the family drops `_total`; a series keeps it
            names.add(f"{family.name}_total")
        if family.type == "info":
            names.add(f"{family.name}_info")
    return names


def test_the_checked_in_dashboards_are_what_build_py_makes():
    rendered = build_module().render()
    on_disk = {p.name: p.read_text() for p in (GRAFANA / "dashboards").glob("*.json")}
    assert on_disk == rendered, "run `make dashboards` and commit the result"


def test_every_panel_queries_metrics_the_worker_exports():
    exported = exported_metrics() | {"up"}
    seen = set()
    for path in (GRAFANA / "dashboards").glob("*.json"):
        board = json.loads(path.read_text())
        assert board["panels"], path.name
        for panel in board["panels"]:
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                names = set(re.findall(r"\b(stallwatch_[a-z_]+|up)\b", target["expr"]))
                assert names, f"{panel['title']}: no metric in {target['expr']!r}"
                unknown = names - exported
                assert not unknown, f"{panel['title']} queries {unknown}, which no worker exports"
                seen |= {_HISTOGRAM_SERIES.sub("", n) for n in names}
    # The overview covers what the operators asked for, coder mode's two metrics included.
    for metric in (
        "stallwatch_events_consumed_total",
        "stallwatch_verdicts_total",
        "stallwatch_stops_total",
        "stallwatch_active_runs",
        "stallwatch_decision_latency_seconds",
        "stallwatch_consumer_lag",
        "stallwatch_dead_letters_total",
        "stallwatch_stall_nudges_total",
        "stallwatch_workspace_version_at_stop",
        "stallwatch_fleet_incidents_open",
    ):
        assert metric in seen, metric


def test_the_provisioned_datasource_is_the_one_the_panels_use():
    import yaml

    source = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    uid = source["datasources"][0]["uid"]
    for path in (GRAFANA / "dashboards").glob("*.json"):
        for panel in json.loads(path.read_text())["panels"]:
            assert panel["datasource"]["uid"] == uid
