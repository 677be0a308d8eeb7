"""The fleet app's Prometheus metrics: seconds, bounded labels (kind, reason, the tenants of the
cluster), no tool or run."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from stallwatch.contract.incidents import INCIDENT_KINDS

# Tally event time to the advisory handed to the producer: the target is 5 s at p99.
_DELAY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)


class FleetMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.tallies = Counter(
            "stallwatch_fleet_tallies_total", "Tallies read from the tallies topic", registry=r
        )
        self.partials = Counter(
            "stallwatch_fleet_partials_total",
            "Merged tallies judged (one per (tenant, tool) and merge interval)",
            registry=r,
        )
        self.dead_letters = Counter(
            "stallwatch_fleet_dead_letters_total",
            "Records of the tallies topic dead-lettered, by reason",
            ["reason"],
            registry=r,
        )
        self.keys = Gauge(
            "stallwatch_fleet_tracked_keys", "(tenant, tool) keys held by this worker", registry=r
        )
        self.state_bytes = Gauge(
            "stallwatch_fleet_state_bytes",
            "Estimated bytes in memory of the (tenant, tool) keys this worker holds, per tenant "
            "(shared: the shared topic's runs); a tenant's new keys are refused past "
            "STALLWATCH_FLEET_MAX_BYTES_PER_TENANT",
            ["tenant"],
            registry=r,
        )
        self.tenant_quota = Counter(
            "stallwatch_fleet_tenant_quota_total",
            "A tenant's quotas at work, per tenant: a new key refused at its quota in keys "
            "(key_quota) or in bytes (memory_quota), or one of its own keys evicted as its keys "
            "grew past its bytes (evicted)",
            ["tenant", "outcome"],
            registry=r,
        )
        self.evicted = Counter(
            "stallwatch_fleet_evicted_keys_total",
            "(tenant, tool) keys evicted at STALLWATCH_FLEET_MAX_KEYS, STALLWATCH_FLEET_MAX_BYTES "
            "or STALLWATCH_FLEET_MAX_BYTES_PER_TENANT",
            registry=r,
        )
        self.unreadable = Counter(
            "stallwatch_fleet_unreadable_windows_total",
            "Table values in a format this worker does not read (a later release's), dropped",
            registry=r,
        )
        self.evicted_open = Counter(
            "stallwatch_fleet_evicted_open_keys_total",
            "Evicted keys that had an open incident, closed by the eviction (every tracked key of "
            "their partition had one)",
            registry=r,
        )
        self.dropped = Counter(
            "stallwatch_fleet_dropped_entries_total",
            "Run ids, fingerprints or args left out by a cap, or buckets too late",
            ["what"],
            registry=r,
        )
        self.open = Gauge(
            "stallwatch_fleet_incidents_open", "Open incidents held by this worker", ["kind"], registry=r
        )
        self.opened = Counter(
            "stallwatch_fleet_incidents_opened_total", "Incidents opened", ["kind"], registry=r
        )
        self.closed = Counter(
            "stallwatch_fleet_incidents_closed_total", "Incidents closed", ["kind"], registry=r
        )
        self.advisories = Counter(
            "stallwatch_fleet_advisories_total",
            "fleet_advisory events written, by phase (open, closed)",
            ["incident"],
            registry=r,
        )
        self.lag = Gauge(
            "stallwatch_fleet_consumer_lag",
            "Records not yet committed on this worker's partitions, by step's input (tallies, partials)",
            ["topic"],
            registry=r,
        )
        self.delay = Histogram(
            "stallwatch_fleet_advisory_delay_seconds",
            "Event time of the tally that opened an incident to its advisories sent",
            buckets=_DELAY_BUCKETS,
            registry=r,
        )
        for kind in INCIDENT_KINDS:  # every series present from the start, at zero
            self.open.labels(kind)
            self.opened.labels(kind)
            self.closed.labels(kind)
