"""Settings from environment variables, each with its default and what it is for."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any


class SetupError(ValueError):
    """A setting to change: the message names the environment variable and what to set it to.
    The command line prints it without a traceback (exit 2)."""


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _number(name: str, default: float, kind: type, minimum: float, maximum: float | None = None) -> Any:
    """A numeric variable; a bad value raises ValueError naming the variable."""
    raw = _env(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise SetupError(f"{name}={raw!r}: expected {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(value):  # nan passes every comparison below; inf breaks the arithmetic
        raise SetupError(f"{name}={raw!r}: expected a finite number")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise SetupError(f"{name}={raw!r}: must be {bound}")
    return value


def _flag(name: str, default: bool = False) -> bool:
    raw = (_env(name) or str(default)).lower()
    if raw not in _FLAGS:
        raise SetupError(f"{name}={raw!r}: expected true or false")
    return _FLAGS[raw]


def _fingerprint_key(name: str = "STALLWATCH_FINGERPRINT_KEY") -> str | None:
    key = _env(name)
    if key is not None and len(key) < MIN_FINGERPRINT_KEY_CHARS:
        raise SetupError(f"{name} is {len(key)} characters: use at least "
                         f"{MIN_FINGERPRINT_KEY_CHARS} (e.g. `openssl rand -hex 32`)")
    return key


def _choice(name: str, raw: str | None, choices: tuple[str, ...]) -> str | None:
    """One of `choices`, in any case (as Kafka's own clients read these); None stays None."""
    if raw is None:
        return None
    value = raw.strip().upper()
    if value not in choices:
        raise SetupError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
    return value


_FLAGS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The mechanisms aiokafka speaks that take settings only (GSSAPI needs a Kerberos set-up).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_PORT_MAX = 65535
# A key shorter than this is guessable: its fingerprints could be reversed like unkeyed ones.
MIN_FINGERPRINT_KEY_CHARS = 16


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
    web_port: int = 9401
    # Address the health endpoints listen on: loopback unless a probe comes from elsewhere.
    web_bind: str = "127.0.0.1"
    # Address /metrics listens on: all interfaces by default, so that Prometheus can scrape it
    # (the metrics hold counts only, no run ids and no content).
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
    # Runs with no event appended for this long (the broker's clock) are expired, so memory stays
    # bounded.
    idle_timeout_s: float = 6 * 3600.0
    # An ended run's state is kept this long (the broker's clock), so that its late calls are
    # refused, not allowed as calls of a run the worker never saw, and an event redelivered
    # within it is recognised; later ones get an answer of their own (contract additions,
    # "Command ids").
    ended_retention_s: float = 600.0
    # Live runs (held, not ended) a partition keeps for one tenant, and in all: a new run past
    # either is a dead letter (run_quota), so that a flood of run ids cannot exhaust a worker's
    # memory. Sized from measured states (docs/operations.md, "Memory").
    max_live_runs_per_tenant: int = 2_000
    max_live_runs: int = 4_000
    # How often (wall clock) a worker scans a partition for expired runs; the rule is broker time.
    expiry_interval_s: float = 60.0
    # How often (wall clock) a partition's transaction also commits the consumer group's offsets.
    # The worker resumes from the position in its changelog, written by every transaction; the
    # group's offsets only feed lag tools (kafka-consumer-groups, Burrow), which lag by this much.
    # Each commit of them costs a transaction two more round trips (about 30% of a small one).
    group_offsets_interval_s: float = 1.0
    # The worker publishes a batch's commands as soon as the batch is applied, by an idempotent
    # producer outside the batch's transaction, which commits once they are acknowledged: a
    # verdict does not wait for the transaction. A command may then appear twice (same id, same
    # bytes) after a worker's restart; readers keep the first copy of each id (contract
    # additions, "Command ids"). Records of a topic that keeps the producers' CreateTime are
    # never published ahead. False: every command in its batch's transaction, as before.
    publish_ahead: bool = True
    # With commands published ahead, a partition's transactions (states, position, tallies) begin
    # at least this far apart, each taking every batch applied since the last: no verdict waits
    # for them, and one transaction per batch (1-2 events at a few hundred events/s) spent the
    # broker's and the worker's CPU on the 2 cores they share with everything else. The cost: a
    # crash reads up to this much again (its verdicts published again, same bytes). Kafka
    # Streams commits every 100 ms under exactly-once too. 0: commit as soon as the last ends.
    commit_interval_s: float = 0.1
    # The secret shared by runtimes and workers that keys every digest reaching Kafka or a
    # state (result fingerprints, call signatures, fact digests), so that a fingerprint of a
    # small value cannot be reversed by hashing guesses. Unset: unkeyed XXH3-128, as before
    # (the risk and the rotation: docs/operations.md). At least 16 characters.
    fingerprint_key: str | None = field(default=None, repr=False)
    # The fleet app's own secret, never given to runtimes: it signs every fleet_advisory, and
    # workers and replay count an advisory only with a valid signature, so no producer but the
    # fleet app can advise a run. Unset: every advisory counts (one team's deployment). At
    # least 16 characters.
    advisory_key: str | None = field(default=None, repr=False)
    # The client sends `args_digest` in place of `args`: a call's arguments never leave it.
    args_digest_only: bool = False
    # The worker writes per-batch partial counts per (tenant, tool) to {prefix}.tallies, the
    # fleet app's input (issue 13); false saves their cost where no fleet app runs.
    tallies: bool = True
    # Dead letters (worker, fleet app, `stallwatch replay`) copy the first 16 KiB of the raw
    # input: off by default, since a bad event may carry a secret in its other fields; a letter
    # always has the input's keyed digest, size, error and position.
    deadletter_raw: bool = False
    # Kafka security, passed to the worker and the client alike.
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    # The passphrase of an encrypted private key (STALLWATCH_SSL_KEYFILE, or the key inside
    # STALLWATCH_SSL_CERTFILE), for every TLS context: the worker's, the client's, the fleet app's.
    ssl_key_password: str | None = field(default=None, repr=False)
    # OAUTHBEARER: `module:callable` returning an aiokafka AbstractTokenProvider (a class is
    # such a callable), e.g. one signing AWS MSK IAM tokens (docs/operations.md).
    sasl_oauth_token_provider: str | None = None

    def __post_init__(self) -> None:
        """The Kafka security settings, checked together wherever Settings are built (from the
        environment or in code): a wrong one must stop the process, not let one part connect
        without credentials while another fails."""
        protocol = _choice("STALLWATCH_SECURITY_PROTOCOL", self.security_protocol, SECURITY_PROTOCOLS)
        mechanism = _choice("STALLWATCH_SASL_MECHANISM", self.sasl_mechanism, SASL_MECHANISMS)
        object.__setattr__(self, "security_protocol", protocol)
        object.__setattr__(self, "sasl_mechanism", mechanism)
        _check_sasl(self)
        _check_tls(self)

    @classmethod
    def from_env(cls) -> Settings:
        replication = _number("STALLWATCH_REPLICATION_FACTOR", cls.replication_factor, int, 1)
        min_insync = _number("STALLWATCH_MIN_INSYNC_REPLICAS", cls.min_insync_replicas, int, 1)
        if min_insync > replication:
            raise SetupError(f"STALLWATCH_MIN_INSYNC_REPLICAS={min_insync} is more than "
                             f"STALLWATCH_REPLICATION_FACTOR={replication}: no write could succeed")
        return cls(
            bootstrap=_env("STALLWATCH_BOOTSTRAP", cls.bootstrap),
            topic_prefix=_env("STALLWATCH_TOPIC_PREFIX", cls.topic_prefix),
            partitions=_number("STALLWATCH_PARTITIONS", cls.partitions, int, 1),
            metrics_port=_number("STALLWATCH_METRICS_PORT", cls.metrics_port, int, 0, _PORT_MAX),
            web_port=_number("STALLWATCH_WEB_PORT", cls.web_port, int, 0, _PORT_MAX),
            web_bind=_env("STALLWATCH_WEB_BIND", cls.web_bind),
            metrics_bind=_env("STALLWATCH_METRICS_BIND", cls.metrics_bind),
            replication_factor=replication,
            min_insync_replicas=min_insync,
            stall_timeout_s=_number("STALLWATCH_STALL_TIMEOUT_S", cls.stall_timeout_s, float, 0.1),
            instance_id=_env("STALLWATCH_INSTANCE_ID"),
            policy_file=_env("STALLWATCH_POLICY_FILE"),
            idle_timeout_s=_number("STALLWATCH_IDLE_TIMEOUT_S", cls.idle_timeout_s, float, 1.0),
            ended_retention_s=_number("STALLWATCH_ENDED_RETENTION_S", cls.ended_retention_s, float,
                                      1.0),
            max_live_runs_per_tenant=_number("STALLWATCH_MAX_LIVE_RUNS_PER_TENANT",
                                             cls.max_live_runs_per_tenant, int, 1),
            max_live_runs=_number("STALLWATCH_MAX_LIVE_RUNS", cls.max_live_runs, int, 1),
            expiry_interval_s=_number("STALLWATCH_EXPIRY_INTERVAL_S", cls.expiry_interval_s, float, 0.1),
            group_offsets_interval_s=_number("STALLWATCH_GROUP_OFFSETS_INTERVAL_S",
                                             cls.group_offsets_interval_s, float, 0.0),
            fingerprint_key=_fingerprint_key(),
            advisory_key=_fingerprint_key("STALLWATCH_ADVISORY_KEY"),
            args_digest_only=_flag("STALLWATCH_ARGS_DIGEST_ONLY"),
            tallies=_flag("STALLWATCH_TALLIES", cls.tallies),
            deadletter_raw=_flag("STALLWATCH_DEADLETTER_RAW", cls.deadletter_raw),
            publish_ahead=_flag("STALLWATCH_PUBLISH_AHEAD", cls.publish_ahead),
            commit_interval_s=_number("STALLWATCH_COMMIT_INTERVAL_S", cls.commit_interval_s, float,
                                      0.0),
            security_protocol=_env("STALLWATCH_SECURITY_PROTOCOL", cls.security_protocol),
            sasl_mechanism=_env("STALLWATCH_SASL_MECHANISM"),
            sasl_username=_env("STALLWATCH_SASL_USERNAME"),
            sasl_password=_env("STALLWATCH_SASL_PASSWORD"),
            ssl_cafile=_env("STALLWATCH_SSL_CAFILE"),
            ssl_certfile=_env("STALLWATCH_SSL_CERTFILE"),
            ssl_keyfile=_env("STALLWATCH_SSL_KEYFILE"),
            ssl_key_password=_env("STALLWATCH_SSL_KEY_PASSWORD"),
            sasl_oauth_token_provider=_env("STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER"),
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
        """The run states, compacted: written in each partition batch's transaction with its position."""
        return f"{self.topic_prefix}.runs-changelog"

    @property
    def tallies_topic(self) -> str:
        """The decision worker's per-batch tool tallies, read by the fleet app (issue 13)."""
        return f"{self.topic_prefix}.tallies"

    @property
    def incidents_topic(self) -> str:
        """The fleet app's incidents, compacted, keyed by incident id."""
        return f"{self.topic_prefix}.incidents"

    @property
    def fleet_partials_topic(self) -> str:
        """The fleet app's merged tallies, re-keyed by (tenant, tool) so one worker owns a tool."""
        return f"{self.topic_prefix}.fleet-partials"

    @property
    def group_id(self) -> str:
        return f"{self.topic_prefix}-detector"


def _check_sasl(settings: Settings) -> None:
    protocol, mechanism = settings.security_protocol, settings.sasl_mechanism
    if protocol.startswith("SASL") and mechanism is None:
        raise SetupError(f"STALLWATCH_SECURITY_PROTOCOL={protocol} needs STALLWATCH_SASL_MECHANISM "
                         f"(one of {', '.join(SASL_MECHANISMS)})")
    if mechanism is not None and not protocol.startswith("SASL"):
        raise SetupError(f"STALLWATCH_SASL_MECHANISM={mechanism} is set but "
                         f"STALLWATCH_SECURITY_PROTOCOL={protocol} uses no SASL: set SASL_SSL or "
                         "SASL_PLAINTEXT")
    if mechanism == "OAUTHBEARER":
        if not settings.sasl_oauth_token_provider:
            raise SetupError("STALLWATCH_SASL_MECHANISM=OAUTHBEARER needs "
                             "STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER (module:callable)")
    elif mechanism is not None and not (settings.sasl_username and settings.sasl_password):
        raise SetupError(f"STALLWATCH_SASL_MECHANISM={mechanism} needs STALLWATCH_SASL_USERNAME and "
                         "STALLWATCH_SASL_PASSWORD")
    if settings.sasl_oauth_token_provider and mechanism != "OAUTHBEARER":
        raise SetupError("STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER is set but STALLWATCH_SASL_MECHANISM "
                         f"is {mechanism or 'unset'}: set OAUTHBEARER")


def _check_tls(settings: Settings) -> None:
    files = {"STALLWATCH_SSL_CAFILE": settings.ssl_cafile,
             "STALLWATCH_SSL_CERTFILE": settings.ssl_certfile,
             "STALLWATCH_SSL_KEYFILE": settings.ssl_keyfile,
             "STALLWATCH_SSL_KEY_PASSWORD": settings.ssl_key_password}
    given = [name for name, value in files.items() if value]
    if given and not settings.security_protocol.endswith("SSL"):
        raise SetupError(f"{given[0]} is set but STALLWATCH_SECURITY_PROTOCOL="
                         f"{settings.security_protocol} uses no TLS: set SSL or SASL_SSL")
    if (settings.ssl_keyfile or settings.ssl_key_password) and not settings.ssl_certfile:
        name = "STALLWATCH_SSL_KEYFILE" if settings.ssl_keyfile else "STALLWATCH_SSL_KEY_PASSWORD"
        raise SetupError(f"{name} is set but STALLWATCH_SSL_CERTFILE is not: the key is the "
                         "client certificate's")
