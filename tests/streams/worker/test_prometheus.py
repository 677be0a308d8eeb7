"""A real Prometheus scrapes a worker that processed a known log; its counters must equal what
the log implies (as the embedded engine computes it)."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from collections import Counter

import orjson
import pytest

from tests.kafka_harness import (
    SETTLE_S,
    WorkerProcess,
    collect,
    fresh_settings,
    produce,
    replay_commands,
    wait_until_serving,
)
from tests.streams.worker.fleet_logs import every_rule, interleave
from tests.waiting import until

pytestmark = pytest.mark.kafka

PROMETHEUS_PORT = 19090


def query(promql: str) -> dict[tuple, float]:
    url = f"http://127.0.0.1:{PROMETHEUS_PORT}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as response:
        data = json.load(response)["data"]["result"]
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data}


@pytest.fixture
def prometheus(tmp_path):
    """Prometheus from Debian's package (make test installs it), scraping every second."""
    servers = []

    def start(metrics_port: int) -> None:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: stallwatch-worker\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n"
        )
        servers.append(
            subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=(tmp_path / "prometheus.log").open("wb"),
            )
        )

    yield start
    for server in servers:
        server.terminate()
        server.wait(30)


async def test_prometheus_sees_the_counts_the_log_implies(prometheus):
    settings = fresh_settings()
    worker = WorkerProcess(settings)
    try:
        prometheus(worker.metrics_port)
        await wait_until_serving(settings)  # one probe call: counted below
        log = interleave(every_rule())
        expected = [orjson.loads(c) for c in replay_commands(log)]
        await produce(settings, log)
        await collect(settings, settings.commands_topic, len(expected), 60, settle_s=SETTLE_S)
        events = Counter(orjson.loads(line)["type"] for line in log)
        events["call_proposed"] += 1
        verdicts = Counter((c["decision"], c["code"] or "none") for c in expected if c["type"] == "verdict")
        verdicts[("allow", "none")] += 1
        stops = Counter(c["code"] for c in expected if c["type"] == "stop")

        def events_counted() -> dict[str, float]:
            counted = query("sum by (type) (stallwatch_events_consumed_total)")
            return {dict(k)["type"]: v for k, v in counted.items()}

        # Prometheus scrapes every second: the counts arrive with a scrape after the last batch.
        await until(
            lambda: events_counted() == dict(events),
            60,
            lambda: f"Prometheus counting the log's events {dict(events)}, not {events_counted()}",
            interval_s=0.5,
        )
        got_verdicts = {
            (dict(k)["decision"], dict(k)["code"]): v
            for k, v in query("sum by (decision, code) (stallwatch_verdicts_total)").items()
        }
        assert got_verdicts == dict(verdicts)
        got_stops = {dict(k)["code"]: v for k, v in query("sum by (code) (stallwatch_stops_total)").items()}
        assert got_stops == dict(stops)
        assert query('up{job="stallwatch-worker"}') and all(
            v == 1 for v in query('up{job="stallwatch-worker"}').values()
        )
        latency = query("sum(stallwatch_decision_latency_seconds_count)")
        assert list(latency.values()) == [len(expected) + 1]
        recoveries = list(query("sum(stallwatch_partition_restore_seconds_count)").values())
        assert recoveries and recoveries[0] >= 1  # at least its start-up
        # Every run ended: the shared topic's live state bytes are back to none.
        assert list(query('stallwatch_live_state_bytes{tenant="shared"}').values()) == [0]
    finally:
        worker.stop()
