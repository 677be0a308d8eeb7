"""Settings from environment variables, each with its default and what it is for."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from stallwatch.engine.admin_policy import AdminPolicy


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


@dataclass(frozen=True)
class Settings:
    # Kafka bootstrap servers, comma-separated.
    bootstrap: str = "127.0.0.1:9092"
    # Prefix of every topic: {prefix}.events, {prefix}.commands, {prefix}.deadletter.
    topic_prefix: str = "stallwatch"
    # Partitions of the events and commands topics: the most workers that can share the load.
    partitions: int = 8
    # Port of the worker's /metrics (Prometheus) endpoint.
    metrics_port: int = 9400
    # The worker's health endpoints (/health/live, /health/ready); one port per worker process.
    web_port: int = 6066
    # Address the health endpoints listen on: loopback unless a probe comes from elsewhere.
    web_bind: str = "127.0.0.1"
    # Address /metrics listens on: all interfaces by default, so that Prometheus can scrape it.
    metrics_bind: str = "0.0.0.0"
    # Replicas of every topic the worker creates, and the fewest in sync for a write to succeed:
    # right for a 3-broker cluster (one broker may be lost with no write refused); the local
    # single broker of `make` sets 1 and 1.
    replication_factor: int = 3
    min_insync_replicas: int = 2
    # A worker whose consume loop made no progress for this long reports itself dead on
    # /health/live, and exits after twice as long, so that its partitions move to a live worker
    # (a hung worker otherwise holds them forever).
    stall_timeout_s: float = 60.0
    # Static group membership (Kafka's group.instance.id), e.g. the pod name of a StatefulSet: a
    # worker restarted under the same id within the session timeout gets its partitions back
    # without a rebalance of the whole group.
    instance_id: str | None = None
    # TOML file of the administrator's tool policy (tools requiring approval, by name or glob).
    policy_file: str | None = None
    # Runs with no event for this long (event time) are expired, so memory stays bounded.
    idle_timeout_s: float = 6 * 3600.0
    # How often (wall clock) a worker scans a partition for expired runs; the rule is event time.
    expiry_interval_s: float = 60.0
    # Kafka security, passed to the worker and the client alike.
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            bootstrap=_env("STALLWATCH_BOOTSTRAP", cls.bootstrap),
            topic_prefix=_env("STALLWATCH_TOPIC_PREFIX", cls.topic_prefix),
            partitions=int(_env("STALLWATCH_PARTITIONS", str(cls.partitions))),
            metrics_port=int(_env("STALLWATCH_METRICS_PORT", str(cls.metrics_port))),
            web_port=int(_env("STALLWATCH_WEB_PORT", str(cls.web_port))),
            web_bind=_env("STALLWATCH_WEB_BIND", cls.web_bind),
            metrics_bind=_env("STALLWATCH_METRICS_BIND", cls.metrics_bind),
            replication_factor=int(_env("STALLWATCH_REPLICATION_FACTOR", str(cls.replication_factor))),
            min_insync_replicas=int(_env("STALLWATCH_MIN_INSYNC_REPLICAS", str(cls.min_insync_replicas))),
            stall_timeout_s=float(_env("STALLWATCH_STALL_TIMEOUT_S", str(cls.stall_timeout_s))),
            instance_id=_env("STALLWATCH_INSTANCE_ID"),
            policy_file=_env("STALLWATCH_POLICY_FILE"),
            idle_timeout_s=float(_env("STALLWATCH_IDLE_TIMEOUT_S", str(cls.idle_timeout_s))),
            expiry_interval_s=float(_env("STALLWATCH_EXPIRY_INTERVAL_S", str(cls.expiry_interval_s))),
            security_protocol=_env("STALLWATCH_SECURITY_PROTOCOL", cls.security_protocol),
            sasl_mechanism=_env("STALLWATCH_SASL_MECHANISM"),
            sasl_username=_env("STALLWATCH_SASL_USERNAME"),
            sasl_password=_env("STALLWATCH_SASL_PASSWORD"),
            ssl_cafile=_env("STALLWATCH_SSL_CAFILE"),
            ssl_certfile=_env("STALLWATCH_SSL_CERTFILE"),
            ssl_keyfile=_env("STALLWATCH_SSL_KEYFILE"),
        )

    @property
    def events_topic(self) -> str:
        return f"{self.topic_prefix}.events"

    @property
    def commands_topic(self) -> str:
        return f"{self.topic_prefix}.commands"

    @property
    def deadletter_topic(self) -> str:
        return f"{self.topic_prefix}.deadletter"

    @property
    def changelog_topic(self) -> str:
        """The run states, compacted: written in the same transactions as the commands."""
        return f"{self.topic_prefix}.runs-changelog"

    @property
    def group_id(self) -> str:
        return f"{self.topic_prefix}-detector"

    def admin_policy(self) -> AdminPolicy:
        return AdminPolicy.load(self.policy_file) if self.policy_file else AdminPolicy()
