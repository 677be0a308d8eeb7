"""Prometheus metrics of the workers and, when asked, of the in-process engine: base units,
no per-run labels (run ids would explode cardinality). A runtime's `EmbeddedClient(metrics=...)`
takes it as the engine's `Counters`."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server

from stallwatch.contract.commands import Command
from stallwatch.contract.stop_codes import STOPS

# Seconds: a batch is a few milliseconds of work; decisions take milliseconds to seconds.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_STREAK_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 40)
# Changes a coding agent made before its stop: a handful to a few hundred.
_VERSION_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500)
_RECOVERY_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
# Tenant and tool names come from events: past this many (tenant, tool) label pairs, a new
# pair's tool is counted as `_other`, so a flood of made-up tool names cannot grow the registry.
MAX_OBSERVED_LABELS = 2_000
OTHER_TOOL = "_other"


class _Children(dict[tuple[str, ...], Any]):
    """A metric's children by their label values, each looked up once: `labels()` checks and locks
    at every call, and a batch counts several. Only for metrics whose children stay registered."""

    def __init__(self, metric: Any) -> None:
        super().__init__()
        self._metric = metric

    def __missing__(self, values: tuple[str, ...]) -> Any:
        child = self[values] = self._metric.labels(*values)
        return child


class StallwatchMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events = Counter(
            "stallwatch_events_consumed_total", "Events applied, by type", ["type"], registry=r
        )
        self.skipped = Counter(
            "stallwatch_events_skipped_total",
            "Events at or below a run's last applied offset (reprocessing after a crash)",
            registry=r,
        )
        self.dead_letters = Counter(
            "stallwatch_dead_letters_total", "Dead letters, by reason", ["reason"], registry=r
        )
        self.verdicts = Counter(
            "stallwatch_verdicts_total", "Verdicts, by decision and code", ["decision", "code"], registry=r
        )
        self.stops = Counter("stallwatch_stops_total", "Stops, by code", ["code"], registry=r)
        # Observe-only runs: what would have happened. A stop's tool is the one it names
        # (tool_failures, no_effect), else empty.
        self.would_refusals = Counter(
            "stallwatch_would_refusals_total",
            "Observe-only runs: calls that would have been refused (they ran), by tenant, tool and code",
            ["tenant", "tool", "code"],
            registry=r,
        )
        self.would_stops = Counter(
            "stallwatch_would_stops_total",
            "Observe-only runs: stops that would have happened (the runs went on), by tenant, tool and code",
            ["tenant", "tool", "code"],
            registry=r,
        )
        self.would_nudges = Counter(
            "stallwatch_would_nudges_total",
            "Observe-only runs: nudges that would have been sent (the model never saw them), by tenant",
            ["tenant"],
            registry=r,
        )
        self._observed_labels: set[tuple[str, str]] = set()
        self.nudges = Counter("stallwatch_nudges_total", "Nudges sent before a stop", registry=r)
        self.stall_nudges = Counter(
            "stallwatch_stall_nudges_total",
            "Coder mode: nudges naming a call whose result stayed the same "
            "across changes (also counted in stallwatch_nudges_total)",
            registry=r,
        )
        self.workspace_version_at_stop = Histogram(
            "stallwatch_workspace_version_at_stop",
            "Coder mode: changes made to the workspace before the stop",
            ["code"],
            buckets=_VERSION_BUCKETS,
            registry=r,
        )
        self.streak_at_stop = Histogram(
            "stallwatch_streak_length_at_stop",
            "The counter that fired, at the stop",
            ["code"],
            buckets=_STREAK_BUCKETS,
            registry=r,
        )
        self.active_runs = Gauge(
            "stallwatch_active_runs", "Runs not ended held in this worker's run store", registry=r
        )
        self.fingerprints = Gauge(
            "stallwatch_fingerprints_held",
            "Result fingerprints and fact digests held by this worker's runs",
            registry=r,
        )
        self.state_bytes = Gauge(
            "stallwatch_live_state_bytes",
            "Estimated bytes of the live runs' states this worker holds, per tenant (shared: the "
            "shared topic's runs); a tenant's new runs are refused past "
            "STALLWATCH_MAX_STATE_BYTES_PER_TENANT on a partition",
            ["tenant"],
            registry=r,
        )
        self.apply_cpu = Counter(
            "stallwatch_apply_cpu_seconds_total",
            "CPU seconds spent applying each tenant's events (shared: the shared topic's), on the "
            "event loop or the apply thread: which tenant a busy worker works for",
            ["tenant"],
            registry=r,
        )
        self.lag = Gauge(
            "stallwatch_consumer_lag",
            "Events not yet committed: end offset minus committed offset",
            ["topic", "partition"],
            registry=r,
        )
        self.batch_seconds = Histogram(
            "stallwatch_batch_processing_seconds",
            "Wall time to apply a batch, produce its commands and write its states",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.event_seconds = Histogram(
            "stallwatch_event_processing_seconds",
            "Wall time per event (its batch's time over its events)",
            buckets=(0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
            registry=r,
        )
        self.batch_events = Histogram(
            "stallwatch_batch_events", "Events per batch", buckets=(1, 5, 10, 50, 100, 250, 500), registry=r
        )
        self.decision_latency = Histogram(
            "stallwatch_decision_latency_seconds",
            "Event time (`ts`) to its command produced and acked",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.fetch_delay = Histogram(
            "stallwatch_fetch_delay_seconds",
            "Broker append to the worker's fetch of a batch's first event "
            "(its longest wait in Kafka; append-time topics only)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_retries = Counter(
            "stallwatch_batch_retries_total",
            "Batches whose transaction failed (nothing of it visible) and that were read again",
            registry=r,
        )
        self.recovery_seconds = Histogram(
            "stallwatch_partition_restore_seconds",
            "Rebalance to ready: the hand-over and the replay of the run states' changelog",
            buckets=_RECOVERY_BUCKETS,
            registry=r,
        )
        self.unreadable_states = Counter(
            "stallwatch_unreadable_states_total",
            "Run states restored in a format this worker does not read, by what became of them: "
            "rebuilt from the events topic, or left to be quarantined (a state_format dead letter)",
            ["outcome"],
            registry=r,
        )
        self._events = _Children(self.events)
        self._dead_letters = _Children(self.dead_letters)
        self._verdicts = _Children(self.verdicts)
        self._lag = _Children(self.lag)
        self.build = Info("stallwatch_build", "Version of the running worker", registry=r)
        try:
            self.build.info({"version": version("stallwatch")})
        except PackageNotFoundError:
            self.build.info({"version": "unknown"})

    def serve(self, port: int, addr: str) -> None:
        """Serve /metrics on `addr` (STALLWATCH_METRICS_BIND)."""
        start_http_server(port, addr=addr, registry=self.registry)

    def count_event(self, kind: str) -> None:
        self._events[(kind,)].inc()

    def count_events(self, by_type: dict[str, int]) -> None:
        for kind, count in by_type.items():
            self._events[(kind,)].inc(count)

    def count_dead_letter(self, reason: str) -> None:
        self._dead_letters[(reason,)].inc()

    def set_lag(self, topic: str, partition: int, events: int) -> None:
        self._lag[(topic, str(partition))].set(events)

    def count_commands(self, commands: list[Command]) -> None:
        for command in commands:
            if command.type == "verdict":
                self._verdicts[(command.decision, command.code or "none")].inc()
            elif command.type == "nudge":
                self.nudges.inc()
                if "same_result_runs" in command.detail:
                    self.stall_nudges.inc()
            elif command.type == "stop":
                self.stops.labels(command.code).inc()
                fired = command.detail.get(STOPS[command.code].fired)
                if fired is not None:
                    self.streak_at_stop.labels(command.code).observe(fired)
                version = command.detail.get("workspace_version")
                if version is not None:
                    self.workspace_version_at_stop.labels(command.code).observe(version)

    def count_observed(self, tenant: str | None, commands: list[Command]) -> None:
        """An observe-only run's commands: its would-have refusals, stops and nudges."""
        who = tenant or ""
        for command in commands:
            if command.type == "verdict" and command.would_code is not None:
                tool = self._tool_label(who, command.tool or "")
                self.would_refusals.labels(who, tool, command.would_code).inc()
            elif command.type == "would_stop":
                named = command.detail.get("tool")
                tool = self._tool_label(who, named if isinstance(named, str) else "")
                self.would_stops.labels(who, tool, command.code).inc()
            elif command.type == "would_nudge":
                self.would_nudges.labels(who).inc()

    def _tool_label(self, tenant: str, tool: str) -> str:
        pair = (tenant, tool)
        if pair in self._observed_labels:
            return tool
        if len(self._observed_labels) >= MAX_OBSERVED_LABELS:
            return OTHER_TOOL
        self._observed_labels.add(pair)
        return tool
