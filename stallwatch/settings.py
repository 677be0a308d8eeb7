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
    # Faust's web port (health checks); one per worker process on a host.
    web_port: int = 6066
    # TOML file of the administrator's tool policy (tools requiring approval, by name or glob).
    policy_file: str | None = None
    # Runs with no event for this long (event time) are expired, so memory stays bounded.
    idle_timeout_s: float = 6 * 3600.0
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
            policy_file=_env("STALLWATCH_POLICY_FILE"),
            idle_timeout_s=float(_env("STALLWATCH_IDLE_TIMEOUT_S", str(cls.idle_timeout_s))),
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

    def admin_policy(self) -> AdminPolicy:
        return AdminPolicy.load(self.policy_file) if self.policy_file else AdminPolicy()
