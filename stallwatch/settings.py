"""Every setting, declared once: its environment variable, type, bounds, default and what it is for.

Each class reads the variables named by its prefix and a field's name in upper case
(`Settings.partitions` is STALLWATCH_PARTITIONS). Built in code, a class takes the values given and
the defaults only; `from_env()` reads the environment. Either way a bad value raises SetupError,
one line naming the variable and what it accepts, which the command line prints without a
traceback (exit 2). The settings table of docs/operations.md is generated from these declarations
(`stallwatch settings --markdown`).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, ClassVar, Literal, Self, get_args, get_origin

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)


class SetupError(ValueError):
    """A setting to change: the message names the environment variable and what to set it to.
    The command line prints it without a traceback (exit 2)."""


def reveal(secret: SecretStr | None) -> str | None:
    """A secret setting's value, for the one call that needs it (never for a log or a message)."""
    return None if secret is None else secret.get_secret_value()


def _upper(value: object) -> object:
    """Closed sets of Kafka names in any case, as Kafka's own clients read them."""
    return value.strip().upper() if isinstance(value, str) else value


def _lower(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


SecurityProtocol = Annotated[
    Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], BeforeValidator(_upper)
]
# The mechanisms aiokafka speaks that take settings only (GSSAPI needs a Kerberos set-up).
SaslMechanism = Annotated[
    Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"], BeforeValidator(_upper)
]
LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_upper)]
LogFormat = Annotated[Literal["json", "text"], BeforeValidator(_lower)]
LogKafka = Annotated[Literal["folded", "raw"], BeforeValidator(_lower)]
Port = Annotated[int, Field(ge=0, le=65535)]
# A tenant's name is part of its topics' names: no dot, so `{prefix}.tenant.{T}.events` parses
# back to one tenant; within Kafka's topic characters.
TENANT_NAME = r"^[A-Za-z0-9_-]{1,64}$"
Tenant = Annotated[str, Field(pattern=TENANT_NAME)]

SECURITY_PROTOCOLS: tuple[str, ...] = get_args(get_args(SecurityProtocol)[0])
SASL_MECHANISMS: tuple[str, ...] = get_args(get_args(SaslMechanism)[0])
# A key shorter than this is guessable: its fingerprints could be reversed like unkeyed ones.
MIN_FINGERPRINT_KEY_CHARS = 16


class Declared(BaseSettings):
    """The common ground of every settings class: frozen values, finite numbers, an empty variable
    taken as unset, and every validation error turned into one SetupError line."""

    model_config = SettingsConfigDict(
        frozen=True, extra="forbid", env_ignore_empty=True, allow_inf_nan=False, hide_input_in_errors=True
    )
    # Fields that are no settings (FleetSettings.base): never read from the environment.
    not_from_env: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SetupError(_describe(type(self), exc, values)) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Built in code: the values given and the defaults, so a test or a library user gets what
        # it wrote whatever the environment holds. from_env reads the environment on purpose.
        return (init_settings,)

    @classmethod
    def env_name(cls, field: str) -> str:
        return f"{cls.model_config.get('env_prefix', '')}{field}".upper()

    @classmethod
    def declared(cls) -> dict[str, FieldInfo]:
        """The settings of this class, by field name: what the environment may set."""
        return {name: info for name, info in cls.model_fields.items() if name not in cls.not_from_env}

    @classmethod
    def is_secret(cls, field: str) -> bool:
        return SecretStr in types_in(cls.model_fields[field].annotation)

    @classmethod
    def from_env(cls) -> Self:
        """The values the environment sets, the defaults for the rest (`stallwatch settings` reads
        every class, the plugins' too, through this)."""
        return cls._from_environment()

    @classmethod
    def _from_environment(cls, **given: Any) -> Self:
        try:
            found = EnvSettingsSource(cls)()
        except SettingsError as exc:
            raise SetupError(str(exc).splitlines()[0]) from None
        return cls(**{k: v for k, v in found.items() if k in cls.declared()}, **given)


class Settings(Declared):
    """The decision workers', the client's and the command line's settings (STALLWATCH_*)."""

    model_config = SettingsConfigDict(env_prefix="STALLWATCH_")

    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, comma-separated")
    topic_prefix: str = Field(
        "stallwatch",
        description="prefix of every topic: `{prefix}.events`, "
        "`{prefix}.commands`, `{prefix}.deadletter`, ...",
    )
    # The broker's ACLs decide who writes a tenant's events, so the tenant of a run is the one its
    # topic names, never what an event says (docs/operations.md, "Trust model").
    tenant: Tenant | None = Field(
        None,
        description="the tenant whose topics a runtime uses "
        "(`{prefix}.tenant.{T}.events`, `.commands`); unset: the shared "
        "topics of a one-team deployment. Workers serve every tenant",
    )
    tenant_scan_interval_s: float = Field(
        10.0,
        ge=0.1,
        description="how often a worker and the "
        "fleet app look for tenants' topics (`stallwatch tenants "
        "add`) to serve",
    )
    partitions: int = Field(
        8,
        ge=1,
        description="partitions of the events and commands topics: the most workers that can share the load",
    )
    metrics_port: Port = Field(9400, description="port of the worker's `/metrics` (Prometheus)")
    web_port: Port = Field(
        9401, description="port of the worker's `/health/live` and `/health/ready`; one per worker process"
    )
    # Loopback unless a probe comes from elsewhere.
    web_bind: str = Field(
        "127.0.0.1", description="address the health endpoints (and the fleet app's web view) listen on"
    )
    # Loopback, as the health endpoints: the metrics hold counts only, but per tenant, and a
    # deployment opens them to its Prometheus on purpose (the manifests and compose set 0.0.0.0).
    metrics_bind: str = Field("127.0.0.1", description="address `/metrics` listens on")
    # Right for a 3-broker cluster (one broker may be lost with no write refused); the local
    # single broker of `make` sets 1 and 1.
    replication_factor: int = Field(3, ge=1, description="replicas of every topic the worker creates")
    min_insync_replicas: int = Field(
        2,
        ge=1,
        description="the fewest replicas in sync for a write "
        "to succeed (at most STALLWATCH_REPLICATION_FACTOR)",
    )
    # Exiting moves a hung worker's partitions to a live one; it would hold them forever.
    stall_timeout_s: float = Field(
        60.0,
        ge=0.1,
        description="`/health/live` answers 503 after this "
        "long without progress of the consume loop; the worker exits "
        "after twice as long",
    )
    instance_id: str | None = Field(
        None,
        description="static group membership (Kafka's "
        "group.instance.id, e.g. the pod name): a restarted worker gets "
        "its partitions back without a rebalance",
    )
    # Observe-only: decisions computed, published, counted and explained, never acted on.
    observe_only: bool = Field(
        False,
        description="every run is observe-only: refusals, stops and nudges are recorded as "
        "what would have happened (`would_code`, `would_stop`, `would_nudge`) and the agent runs on",
    )
    observe_only_tenants: Annotated[tuple[Tenant, ...], NoDecode] = Field(
        (),
        description="tenants, comma-separated, whose runs are observe-only (as STALLWATCH_OBSERVE_ONLY)",
    )
    # OpenTelemetry in (`stallwatch serve`'s /v1/traces and /v1/logs, `stallwatch otlp-kafka`):
    # always observe-only. A round's decisions come when the next model call's span arrives, or
    # after this quiet gap (docs/otlp.md, "Rounds from spans").
    otlp_round_quiet_s: float = Field(
        30.0,
        ge=0.1,
        description="OTLP: a run's open round is closed after this long with no span of the run",
    )
    otlp_run_idle_s: float = Field(
        600.0,
        ge=1.0,
        description="OTLP: a run with no span for this long is ended (a run keyed by its trace "
        "also ends with its root span)",
    )
    otlp_mode: Literal["researcher", "chat", "coder"] = Field(
        "researcher", description="OTLP: the mode whose rules judge the runs read from spans"
    )
    otlp_topic: str = Field(
        "otlp_spans",
        description="`stallwatch otlp-kafka`: the topic the OpenTelemetry Collector's Kafka "
        "exporter writes (`otlp_proto` encoding)",
    )
    policy_file: str | None = Field(
        None,
        description="TOML file of the administrator's tool policy "
        "(`requires_approval` / `repeat_exempt` by name or glob)",
    )
    # The broker's append time: an events topic created by hand should set
    # message.timestamp.type=LogAppendTime, else the worker's clock on receipt stands in.
    idle_timeout_s: float = Field(
        6 * 3600.0,
        ge=1.0,
        description="runs with no event for this long "
        "(the broker's clock) are expired, so memory stays bounded",
    )
    # Its late calls are then refused, not allowed as calls of a run the worker never saw; later
    # ones get an answer of their own (contract additions, "Command ids").
    ended_retention_s: float = Field(
        600.0,
        ge=1.0,
        description="how long an ended run's state is "
        "kept (the broker's clock): its late calls refused, a "
        "redelivered event recognised",
    )
    # Sized from measured states (docs/operations.md, "Memory").
    max_live_runs_per_tenant: int = Field(
        2_000,
        ge=1,
        description="live runs one partition keeps "
        "for one tenant; a new run past it is a dead letter "
        "(`run_quota`)",
    )
    max_live_runs: int = Field(
        4_000,
        ge=1,
        description="live runs one partition keeps in all; a new run past it is a dead letter (`run_quota`)",
    )
    # One tenant's flood on every partition of a worker (8 in the manifests) holds 8 x this at
    # most: 1 GiB of the 2 GiB limit, so the process serving the others stays up.
    max_state_bytes_per_tenant: int = Field(
        128 << 20,
        ge=1 << 20,
        description="estimated bytes in memory of one tenant's live runs on one partition; a new "
        "run past it is a dead letter (`memory_quota`)",
    )
    expiry_interval_s: float = Field(
        60.0, ge=0.1, description="how often (wall clock) a worker scans a partition for expired runs"
    )
    # The worker resumes from the position in its changelog; each commit of the group's offsets
    # costs a transaction two more round trips (about 30% of a small one).
    group_offsets_interval_s: float = Field(
        1.0,
        ge=0.0,
        description="how often a partition's "
        "transaction also commits the consumer group's offsets "
        "(what lag tools read)",
    )
    # A command may then appear twice (same id, same bytes) after a restart; readers keep the
    # first copy of each id (contract additions, "Command ids"). Records of a topic that keeps
    # the producers' CreateTime are never published ahead.
    publish_ahead: bool = Field(
        True,
        description="publish a batch's commands as soon as it is "
        "applied, outside its transaction; false: inside it",
    )
    # An event that kills its worker would crash-loop every worker its partition moves to:
    # stallwatch_streams/worker/attempts.py. The price is an acknowledged write per fetched batch.
    off_loop_event_bytes: int = Field(
        32 << 10,
        ge=0,
        description="a batch holding an event of at least this many bytes is applied on the "
        "worker's apply thread, so that one tenant's large events delay no other tenant's "
        "verdicts, heartbeats or health answers by more than a few milliseconds; 0: every batch "
        "on the event loop",
    )
    poison_guard: bool = Field(
        True,
        description="write each batch's offsets to the attempts topic before applying it, so that "
        "an event that kills its worker is dead-lettered after two deaths; false saves that "
        "round trip per batch",
    )
    # docs/tenants.md weighs the two: a transactional producer per input partition (aiokafka,
    # fenced by transactional id), or one per tenant group (librdkafka, fenced by the group's
    # generation, KIP-447), whose clients do not grow with the tenants.
    transaction_model: Literal["partition", "group"] = Field(
        "partition",
        description="partition: a consumer group per tenant and a transactional producer per "
        "input partition; group: tenants hashed into STALLWATCH_TENANT_GROUPS consumer groups, "
        "one consumer and one transactional producer each (every worker of a cluster the same)",
    )
    tenant_groups: int = Field(
        4,
        ge=1,
        le=256,
        description="the group model's tenant groups: a rebalance touches one group's tenants, "
        "and a worker keeps about two clients per group",
    )
    fetch_buffer_max_bytes_per_tenant: int = Field(
        8 << 20,
        ge=1 << 20,
        description="the group model: a tenant's fetched records waiting for its pipeline, past "
        "which its partitions are paused until it has taken half of them (a tenant's flood or "
        "backlog holds no more of the worker's memory)",
    )
    fetch_buffer_max_bytes: int = Field(
        256 << 20,
        ge=16 << 20,
        description="the group model: every tenant's fetched records waiting in one worker, "
        "shared evenly by the tenant groups; past a group's share, each of its tenants may keep "
        "only its fair share waiting (every tenant read back from a backlog at once)",
    )
    # One transaction per batch spent the broker's and the worker's CPU; Kafka Streams commits
    # every 100 ms under exactly-once too. A crash reads up to this much again.
    commit_interval_s: float = Field(
        0.1,
        ge=0.0,
        description="with commands published ahead, the "
        "least time between a partition's transactions; 0: one as "
        "soon as the last ends",
    )
    # Unset: unkeyed XXH3-128 (the risk and the rotation: docs/operations.md).
    fingerprint_key: SecretStr | None = Field(
        None,
        description="secret shared by runtimes and "
        "workers that keys every fingerprint and digest, "
        f"at least {MIN_FINGERPRINT_KEY_CHARS} characters",
    )
    # Never given to runtimes: no producer but the fleet app can then advise a run. Unset: every
    # advisory counts (one team's deployment).
    advisory_key: SecretStr | None = Field(
        None,
        description="the fleet app's secret that signs "
        "every `fleet_advisory`; workers and replay count an "
        "advisory only with a valid signature (else a dead "
        "letter, `unsigned_advisory`), at least "
        f"{MIN_FINGERPRINT_KEY_CHARS} characters",
    )
    args_digest_only: bool = Field(
        False,
        description="the client sends `args_digest` in place of `args`: a call's arguments never leave it",
    )
    tallies: bool = Field(
        True,
        description="the worker writes per-batch counts per (tenant, tool) "
        "to `{prefix}.tallies`, the fleet app's input; false where none runs",
    )
    # A bad event may carry a secret in its other fields.
    deadletter_raw: bool = Field(
        False,
        description="dead letters (worker, fleet app, `stallwatch "
        "replay`) copy the first 16 KiB of the raw input",
    )
    # A frozen broker (a long pause, a network that drops packets) keeps its connections open
    # and answers nothing: a write, a fetch or a transaction's step sent to it waits this long
    # before it goes to the partition's new leader (aiokafka's default: 40 s). Long enough for a
    # loaded broker's answer, a write waiting for its replicas included.
    kafka_request_timeout_ms: int = Field(
        5_000,
        ge=1_000,
        description="how long every Kafka client "
        "of the process waits for a broker's answer before it "
        "drops the connection and sends the request again",
    )
    # aiokafka refreshes its view when a connection fails, not when a request times out: a client
    # whose requests to a frozen leader time out sends them to it again until the view is renewed
    # (aiokafka's default age: 5 minutes). One metadata request per client per period.
    kafka_metadata_max_age_ms: int = Field(
        3_000,
        ge=500,
        description="how old a Kafka client's "
        "view of the cluster (partitions' leaders, brokers) may "
        "get: within this of a leader's move, every client "
        "follows it",
    )
    security_protocol: SecurityProtocol = Field(
        "PLAINTEXT", description="Kafka security protocol, for the worker, the client and the fleet app alike"
    )
    sasl_mechanism: SaslMechanism | None = Field(
        None, description="required with a `SASL_` protocol, refused without one"
    )
    sasl_username: str | None = Field(None, description="PLAIN and SCRAM: the user name")
    sasl_password: SecretStr | None = Field(None, description="PLAIN and SCRAM: the password")
    ssl_cafile: str | None = Field(
        None, description="PEM file of the brokers' certificate authority (TLS protocols only)"
    )
    ssl_certfile: str | None = Field(
        None, description="PEM file of the client certificate (TLS protocols only)"
    )
    ssl_keyfile: str | None = Field(
        None, description="PEM file of the client certificate's key (else the key in STALLWATCH_SSL_CERTFILE)"
    )
    ssl_key_password: SecretStr | None = Field(
        None, description="passphrase of an encrypted client key, for every TLS context of the process"
    )
    # A class is such a callable: e.g. one signing AWS MSK IAM tokens (docs/operations.md).
    sasl_oauth_token_provider: str | None = Field(
        None, description="OAUTHBEARER: `module:callable` returning an aiokafka AbstractTokenProvider"
    )

    @field_validator("bootstrap")
    @classmethod
    def _every_broker_has_a_port(cls, bootstrap: str) -> str:
        """A broker without its port would mean 9092 in silence: named instead."""
        for broker in bootstrap.split(","):
            host, _, port = broker.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise SetupError(
                    f"STALLWATCH_BOOTSTRAP={bootstrap}: {broker.strip() or 'an empty entry'} has no "
                    "port: give each broker as host:port, comma-separated (e.g. localhost:9092)"
                )
        return bootstrap

    @field_validator("observe_only_tenants", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        return value

    @field_validator("fingerprint_key", "advisory_key")
    @classmethod
    def _long_enough(cls, key: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if key is not None and len(key.get_secret_value()) < MIN_FINGERPRINT_KEY_CHARS:
            raise SetupError(
                f"{cls.env_name(str(info.field_name))} is {len(key.get_secret_value())} "
                f"characters: use at least {MIN_FINGERPRINT_KEY_CHARS} (e.g. `openssl rand "
                "-hex 32`)"
            )
        return key

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """Checked together wherever Settings are built (from the environment or in code): a wrong
        one must stop the process, not let one part connect without credentials while another
        fails."""
        if self.min_insync_replicas > self.replication_factor:
            raise SetupError(
                f"STALLWATCH_MIN_INSYNC_REPLICAS={self.min_insync_replicas} is more than "
                f"STALLWATCH_REPLICATION_FACTOR={self.replication_factor}: no write could "
                "succeed"
            )
        _check_sasl(self)
        _check_tls(self)
        return self

    @classmethod
    def from_env(cls) -> Settings:
        return cls._from_environment()

    def for_tenant(self, tenant: str | None) -> Settings:
        """The same settings for `tenant`'s topics and consumer group."""
        return self.model_copy(update={"tenant": tenant})

    @property
    def runs_prefix(self) -> str:
        """The prefix of the topics that hold runs: the tenant's, or the shared ones."""
        return self.topic_prefix if self.tenant is None else tenant_prefix(self.topic_prefix, self.tenant)

    @property
    def events_topic(self) -> str:
        return f"{self.runs_prefix}.events"

    @property
    def commands_topic(self) -> str:
        return f"{self.runs_prefix}.commands"

    @property
    def deadletter_topic(self) -> str:
        return f"{self.runs_prefix}.deadletter"

    @property
    def changelog_topic(self) -> str:
        """The run states, compacted: written in each partition batch's transaction with its position."""
        return f"{self.runs_prefix}.runs-changelog"

    @property
    def attempts_topic(self) -> str:
        """Where each partition's owners started and what they applied when they died (every
        tenant's, compacted, the workers' alone): stallwatch_streams/worker/attempts.py."""
        return f"{self.topic_prefix}.worker-attempts"

    @property
    def tallies_topic(self) -> str:
        """The decision worker's per-batch tool tallies, read by the fleet app."""
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
        """The decision workers' consumer group: one per tenant, so that one tenant's rebalance
        or poison record never pauses another's partitions."""
        shared = f"{self.topic_prefix}-detector"
        return shared if self.tenant is None else f"{shared}.tenant.{self.tenant}"


def tenant_prefix(topic_prefix: str, tenant: str) -> str:
    return f"{topic_prefix}.tenant.{tenant}"


def tenant_of_events_topic(topic_prefix: str, topic: str) -> str | None:
    """The tenant whose events topic `topic` is (None: not a tenant's events topic)."""
    head, tail = f"{topic_prefix}.tenant.", ".events"
    if not (topic.startswith(head) and topic.endswith(tail)):
        return None
    name = topic[len(head) : -len(tail)]
    return name if re.fullmatch(TENANT_NAME, name) else None


def _check_sasl(settings: Settings) -> None:
    protocol, mechanism = settings.security_protocol, settings.sasl_mechanism
    if protocol.startswith("SASL") and mechanism is None:
        raise SetupError(
            f"STALLWATCH_SECURITY_PROTOCOL={protocol} needs STALLWATCH_SASL_MECHANISM "
            f"(one of {', '.join(SASL_MECHANISMS)})"
        )
    if mechanism is not None and not protocol.startswith("SASL"):
        raise SetupError(
            f"STALLWATCH_SASL_MECHANISM={mechanism} is set but "
            f"STALLWATCH_SECURITY_PROTOCOL={protocol} uses no SASL: set SASL_SSL or "
            "SASL_PLAINTEXT"
        )
    if mechanism == "OAUTHBEARER":
        if not settings.sasl_oauth_token_provider:
            raise SetupError(
                "STALLWATCH_SASL_MECHANISM=OAUTHBEARER needs "
                "STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER (module:callable)"
            )
    elif mechanism is not None and not (settings.sasl_username and settings.sasl_password):
        raise SetupError(
            f"STALLWATCH_SASL_MECHANISM={mechanism} needs STALLWATCH_SASL_USERNAME and "
            "STALLWATCH_SASL_PASSWORD"
        )
    if settings.sasl_oauth_token_provider and mechanism != "OAUTHBEARER":
        raise SetupError(
            "STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER is set but STALLWATCH_SASL_MECHANISM "
            f"is {mechanism or 'unset'}: set OAUTHBEARER"
        )


def _check_tls(settings: Settings) -> None:
    files = {
        "STALLWATCH_SSL_CAFILE": settings.ssl_cafile,
        "STALLWATCH_SSL_CERTFILE": settings.ssl_certfile,
        "STALLWATCH_SSL_KEYFILE": settings.ssl_keyfile,
        "STALLWATCH_SSL_KEY_PASSWORD": settings.ssl_key_password,
    }
    given = [name for name, value in files.items() if value]
    if given and not settings.security_protocol.endswith("SSL"):
        raise SetupError(
            f"{given[0]} is set but STALLWATCH_SECURITY_PROTOCOL="
            f"{settings.security_protocol} uses no TLS: set SSL or SASL_SSL"
        )
    if (settings.ssl_keyfile or settings.ssl_key_password) and not settings.ssl_certfile:
        name = "STALLWATCH_SSL_KEYFILE" if settings.ssl_keyfile else "STALLWATCH_SSL_KEY_PASSWORD"
        raise SetupError(
            f"{name} is set but STALLWATCH_SSL_CERTFILE is not: the key is the client certificate's"
        )


class LogSettings(Declared):
    """The logs of every stallwatch process (STALLWATCH_LOG_*), set up by stallwatch.logs."""

    model_config = SettingsConfigDict(env_prefix="STALLWATCH_LOG_")

    level: LogLevel | None = Field(
        None,
        description="the level of the process's own logs; unset: "
        "`INFO` (the demo, the benchmarks and the tools: `WARNING`)",
    )
    format: LogFormat | None = Field(
        None, description="`json` or `text`; unset: `json` unless stderr is a terminal"
    )
    summary_s: float = Field(
        30.0, gt=0.0, description="while a Kafka trouble lasts, one summary line this often"
    )
    kafka: LogKafka = Field(
        "folded",
        description="`folded`: aiokafka's retried complaints folded "
        "into a few counted lines; `raw`: each as aiokafka logs it",
    )

    @classmethod
    def from_env(cls) -> LogSettings:
        return cls._from_environment()


class ServeSettings(Declared):
    """`stallwatch serve` and the coding agents' hooks (STALLWATCH_SERVE_*). `stallwatch hook`
    reads these two variables itself: it runs on every tool call and imports no pydantic."""

    model_config = SettingsConfigDict(env_prefix="STALLWATCH_SERVE_")

    token: SecretStr | None = Field(
        None,
        description="the token every request but `/v1/health` "
        "must carry (`Authorization: Bearer …`); required to bind "
        "anything but loopback; unset on loopback, `serve` makes its own, which only this user's "
        "hooks read (`--open`: none)",
    )
    url: str = Field("http://127.0.0.1:8737", description="where `stallwatch hook <agent>` finds the server")

    @classmethod
    def from_env(cls) -> ServeSettings:
        return cls._from_environment()


def _describe(cls: type[Declared], exc: ValidationError, given: dict[str, Any]) -> str:
    """Every error of a validation, on one line, each naming its variable and what it accepts."""
    return "; ".join(dict.fromkeys(_one_error(cls, error, given) for error in exc.errors()))


def _one_error(cls: type[Declared], error: Any, given: dict[str, Any]) -> str:
    raised = error.get("ctx", {}).get("error")
    if isinstance(raised, SetupError):  # a check of ours: its message is already the line
        return str(raised)
    field = str(error["loc"][0]) if error["loc"] else ""
    if field not in cls.model_fields:
        return f"{cls.__name__}: {error['msg']}"
    name, accepts = cls.env_name(field), _accepts(cls.model_fields[field], error)
    if cls.is_secret(field):  # the value is never repeated, not even a wrong one
        return f"{name}: {accepts}"
    return f"{name}={given.get(field)!r}: {accepts}"


def _accepts(info: FieldInfo, error: Any) -> str:
    kind = error["type"]
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return "expected an integer"
    if kind in ("float_parsing", "float_type"):
        return "expected a number"
    if kind == "finite_number":
        return "expected a finite number"
    if kind == "bool_parsing" or kind == "bool_type":
        return "expected true or false"
    if kind == "literal_error":
        return f"expected one of {', '.join(choices(info))}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return f"must be {bounds(info)}"
    return str(error["msg"]).lower()


def bounds(info: FieldInfo) -> str:
    """A numeric setting's range in words ("between 0 and 65535", "at least 1"); "" if none."""
    low = next((m for m in info.metadata if hasattr(m, "ge") or hasattr(m, "gt")), None)
    high = next((m.le for m in info.metadata if hasattr(m, "le")), None)
    low_words = "" if low is None else (f"at least {low.ge}" if hasattr(low, "ge") else f"more than {low.gt}")
    if low is not None and high is not None and hasattr(low, "ge"):
        return f"between {low.ge} and {high}"
    return " and ".join(w for w in (low_words, "" if high is None else f"at most {high}") if w)


def choices(info: FieldInfo) -> tuple[str, ...]:
    """The values a closed-set setting accepts, in declared order."""
    return tuple(a for t in types_in(info.annotation) if get_origin(t) is Literal for a in get_args(t))


def types_in(annotation: Any) -> list[Any]:
    """The types an annotation is made of: `X | None` and Annotated[...] unwrapped."""
    if get_origin(annotation) is Annotated:
        return types_in(get_args(annotation)[0])
    if get_origin(annotation) is Literal:
        return [annotation]
    args = get_args(annotation)
    return [t for a in args for t in types_in(a)] if args else [annotation]


def is_loopback(host: str | None) -> bool:
    """Whether a bind address or a peer is this machine alone (`localhost` or a loopback IP)."""
    if host == "localhost":
        return True
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
