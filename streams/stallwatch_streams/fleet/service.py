"""The fleet app on Faust: merge the tallies, re-key them by (tenant, tool), judge windows."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import faust
import orjson
from aiokafka.admin import NewTopic
from aiokafka.errors import KafkaError
from faust.exceptions import PartitionsMismatch
from prometheus_client import generate_latest

from stallwatch.contract.advisories import advisory_key_of, signed
from stallwatch.contract.commands import DeadLetter
from stallwatch.contract.digests import secret_from_key
from stallwatch.contract.faults import fault
from stallwatch.kafka.options import oauth_token_provider, ssl_context
from stallwatch.kafka.topics import list_topic_names, tenants_in
from stallwatch.settings import Settings, reveal
from stallwatch_streams.fleet.metrics import FleetMetrics
from stallwatch_streams.fleet.readers import Readers
from stallwatch_streams.fleet.rules import IncidentRules, Outcome
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.fleet.signing import warn_if_unsigned
from stallwatch_streams.fleet.tally import InvalidTally, Tally, merge, new_partial, parse_tally
from stallwatch_streams.fleet.task import IncidentTask, KeyQuota, key_fingerprint, tenant_label
from stallwatch_streams.fleet.tasks import IncidentTasks
from stallwatch_streams.fleet.transport import committed_offsets, use_transport
from stallwatch_streams.fleet.window import bucket_of

log = logging.getLogger(__name__)

# Tallies merged into one batch at most (with the merge interval, whichever comes first).
MERGE_BATCH = 1_000
# A tally stamped further ahead of this worker's clock does not move the event-time clock that
# closes incidents: one runtime with a wrong clock could otherwise close every incident at once.
MAX_CLOCK_AHEAD_S = 60.0
# The exit status of a fleet worker whose table cannot be written (its changelog's partitions are
# not the partials' in the consumer's view): skipping the record instead committed past windows
# never saved, and a restart then never opened their incident (sysexits' EX_TEMPFAIL).
EXIT_TABLE_UNWRITABLE = 75
# The table of windows and incidents; Faust names its changelog `{app id}-{name}-changelog`.
TABLE_NAME = "fleet-state"


def changelog_topic(cfg: FleetSettings) -> NewTopic:
    """The table's changelog as Faust would create it, for `stallwatch fleet` to create first: a
    changelog Faust creates at start-up may be missing from the metadata when the group joins,
    and is then counted as 0 partitions until the next metadata refresh (up to minutes), every
    table write in between failing with PartitionsMismatch (seen in `make run` on a loaded
    machine: the scene's incident never opened)."""
    base = cfg.base
    return NewTopic(
        f"{cfg.group_id}-{TABLE_NAME}-changelog",
        base.partitions,
        base.replication_factor,
        topic_configs={"cleanup.policy": "compact", "min.insync.replicas": str(base.min_insync_replicas)},
    )


def _raw_topic(app: faust.App, name: str) -> faust.TopicT:
    return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")


def faust_credentials(settings: Settings) -> faust.types.auth.CredentialsT | None:
    """The worker's and the client's Kafka security settings, in Faust's terms (SASL over plaintext
    or TLS, or TLS alone), so that the fleet app reaches the brokers the workers reach."""
    context = ssl_context(settings)
    if settings.sasl_mechanism == "OAUTHBEARER":
        return faust.OAuthCredentials(oauth_cb=oauth_token_provider(settings), ssl_context=context)
    if settings.security_protocol.startswith("SASL"):
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=reveal(settings.sasl_password),
            ssl_context=context,
            mechanism=settings.sasl_mechanism,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


class FleetService:
    """One Faust app: two agents (merge, judge), a timer (event-time ticks) and a web view."""

    def __init__(self, cfg: FleetSettings, metrics: FleetMetrics | None = None) -> None:
        self.cfg = cfg
        base = cfg.base
        self.metrics = metrics or FleetMetrics()
        self.rules = IncidentRules(cfg)
        # Keys the digest of a dead letter's input, as the workers' (every digest that
        # leaves a process is keyed when a key is set).
        self.secret = secret_from_key(reveal(base.fingerprint_key))
        # Signs every advisory, so that workers know it for the fleet app's (None: unsigned).
        self.advisory_key = advisory_key_of(reveal(base.advisory_key))
        self.app = app = faust.App(
            cfg.group_id,
            broker=[f"kafka://{b.strip()}" for b in base.bootstrap.split(",")],
            store="memory://",
            topic_partitions=base.partitions,
            topic_replication_factor=base.replication_factor,
            table_standby_replicas=0,
            web_port=cfg.web_port,
            web_bind=base.web_bind,
            web_host=base.web_bind,
            broker_session_timeout=cfg.session_timeout_s,
            broker_heartbeat_interval=1.0,
            broker_commit_interval=1.0,
            producer_acks=-1,
            consumer_auto_offset_reset="earliest",
            broker_credentials=faust_credentials(base),
            autodiscover=False,
            # Faust's own views: /router/ lists every worker's URL and the keys they own, /table/
            # reads any key of the table (tenants, tools, incidents). Neither is used here (no
            # @table_route): the web port serves /incidents/, /metrics and Faust's "/" status only.
            web_router_enabled=False,
            web_tables_enabled=False,
        )
        # read_committed, the fetch wait and the project's aiokafka clients, in the consumer and
        # producer Faust builds (transport.py).
        use_transport(app, cfg.fetch_wait_ms)
        self.tallies = _raw_topic(app, base.tallies_topic)
        self.partials = _raw_topic(app, base.fleet_partials_topic)
        self.incidents = _raw_topic(app, base.incidents_topic)
        self.events = _raw_topic(app, base.events_topic)
        # Each tenant's events topic, as the last scan found them: a tenant's runs are there, so
        # its advisories go there too (the shared topic's runs name their tenant themselves).
        self.tenant_events: dict[str, faust.TopicT] = {}
        self.unsigned_warned: set[str] = set()  # tenants named in the unsigned-advisories error
        self.deadletter = _raw_topic(app, base.deadletter_topic)
        self.table = app.Table(TABLE_NAME, default=None, partitions=base.partitions, key_type=bytes)
        # Tables take no serializer arguments (faust-streaming #556): Faust derives json from the
        # types; keys are raw bytes, set before the changelog topic is first built.
        self.table.key_serializer = "raw"  # type: ignore[attr-defined]  # on Table, not TableT
        # This worker's view of its keys, a task per partials partition it judges (fleet/task.py).
        self.tasks = IncidentTasks(cfg, self.table, self.rules, self.metrics, self.secret)
        self.clock = 0.0  # event time: the newest tick this worker's judge has seen
        self.watermark = 0.0  # event time: the newest tally whose partials the merge has sent
        app.agent(self.tallies, name="merge")(self.merge_tallies)
        app.agent(self.partials, name="judge")(self._judge)
        app.timer(cfg.tick_interval_s)(self._tick)
        app.task(self._scan_tenants)  # once at start, before any incident can open
        app.timer(base.tenant_scan_interval_s)(self._scan_tenants)
        self.readers = Readers(
            None if cfg.reader_tokens_dir is None else Path(cfg.reader_tokens_dir), base.web_bind
        )
        app.task(self._warn_if_local_only)
        self._views()
        # mode types a handler as taking any positional arguments; this signal sends one.
        app.on_partitions_assigned.connect(self._on_assigned)  # type: ignore[arg-type]

    async def _warn_if_local_only(self) -> None:
        self.readers.warn_if_local_only()

    # The merge step: tallies (partitioned like the runs) to partials (partitioned by tool).

    async def merge_tallies(self, stream: faust.StreamT) -> Any:
        # take_events is Stream's, missing from the StreamT that Faust's agents are typed with.
        batches = stream.take_events(MERGE_BATCH, within=self.cfg.merge_interval_s)  # type: ignore[attr-defined]
        async for events in batches:
            partials: dict[tuple[bytes, int], Tally] = {}
            newest = self.watermark
            for event in events:
                message = event.message
                try:
                    newest = self._merge_one(partials, message, newest)
                except InvalidTally as error:
                    await self._dead_letter(message, str(error))
                except Exception as error:
                    # Any other fault stays with its record, as in the judge step: the rest of
                    # the batch merges, and the record goes to the dead letters.
                    log.error(
                        "merge: tallies partition %s offset %s not merged (%s)",
                        message.partition,
                        message.offset,
                        fault(error),
                    )
                    await self._dead_letter(message, f"merge: {type(error).__name__}", "merge_error")
            for (key, _), partial in partials.items():
                await self.partials.send(key=key, value=orjson.dumps(partial))
            # The ticks carry event time only once the partials behind it are handed to the
            # producer: a tick sent first would close an incident before a run's partial in the
            # same batch was judged, and that run would never be told.
            self.watermark = newest
            yield len(events)

    def _merge_one(self, partials: dict[tuple[bytes, int], Tally], message: Any, newest: float) -> float:
        """One tally record into the batch's partials, and the batch's event time after it;
        raises InvalidTally for bad input."""
        tally = parse_tally(message.value, message.key)
        self.metrics.tallies.inc()
        key = message.key or b""
        if tally["ts"] <= time.time() + MAX_CLOCK_AHEAD_S:
            newest = max(newest, tally["ts"])
        slot = (key, bucket_of(tally["ts"], self.cfg.step_s))
        partial = partials.get(slot)
        if partial is None:
            partial = partials[slot] = new_partial(tally["tenant"], tally["tool"], tally["ts"])
        merge(partial, tally)
        return newest

    async def _dead_letter(self, message: Any, error: str, reason: str = "invalid_tally") -> None:
        log.warning(
            "dead letter: %s partition %s offset %s: %s",
            message.topic,
            message.partition,
            message.offset,
            error,
        )
        self.metrics.dead_letters.labels(reason).inc()
        letter = DeadLetter.of(
            message.value,
            error,
            message.topic,
            message.partition,
            message.offset,
            self.secret,
            self.cfg.base.deadletter_raw,
        )
        await self.deadletter.send(key=message.key, value=letter.encode(), partition=message.partition)

    async def _scan_tenants(self) -> None:
        """The tenants whose events topic exists (`stallwatch tenants add`); a broker that does
        not answer leaves the last scan's in place."""
        base = self.cfg.base
        try:
            found = tenants_in(base, await list_topic_names(base))
        except (KafkaError, OSError) as exc:
            log.debug("the scan for tenants' topics failed (%s); trying again", fault(exc))
            return
        self.unsigned_warned = warn_if_unsigned(found, self.advisory_key, self.unsigned_warned)
        for tenant in found - self.tenant_events.keys():
            self.tenant_events[tenant] = _raw_topic(self.app, base.for_tenant(tenant).events_topic)
        for gone in self.tenant_events.keys() - found:
            del self.tenant_events[gone]

    async def _tick(self) -> None:
        """Every partition of the partials hears this worker's event time: incidents of tools no
        longer called still close."""
        self._measure_lag()
        if self.watermark <= 0:
            return
        value = orjson.dumps({"tick": self.watermark})
        for partition in range(self.cfg.base.partitions):
            await self.partials.send(key=None, value=value, partition=partition)

    def _measure_lag(self) -> None:
        """Highwater minus committed offset over this worker's partitions of each input; Faust
        keeps both, the committed one only in a private attribute (so a failure is tolerated)."""
        consumer = self.app.consumer
        try:
            assigned = consumer.assignment()
            committed = committed_offsets(consumer)
            for label, topic in (
                ("tallies", self.cfg.base.tallies_topic),
                ("partials", self.cfg.base.fleet_partials_topic),
            ):
                lag = 0
                for tp in assigned:
                    if tp.topic == topic:
                        highwater = consumer.highwater(tp)
                        if highwater is not None and highwater >= 0:
                            lag += max(0, highwater - (committed.get(tp) or 0))
                self.metrics.lag.labels(label).set(lag)
        except (AttributeError, KeyError, TypeError) as error:
            log.debug("lag not measured: %s", error)

    # The judge step: one (tenant, tool) per key, windows in the table.

    async def _judge(self, stream: faust.StreamT) -> Any:
        async for event in stream.events():
            message = event.message
            if not self.tasks.indexed:
                self.tasks.index(self.table.data, self._held_partitions(), self.cfg.base.partitions)
            try:
                record = orjson.loads(message.value)
                if "tick" in record:
                    self.clock = max(self.clock, record["tick"])
                    task = self.tasks.get(message.partition)
                    if task is not None:
                        self._close_quiet(task)
                else:
                    await self._apply(self.tasks.for_record(message.partition), message.key, record)
            except PartitionsMismatch as error:
                self._exit_unwritable(message, error)
            except KeyQuota as error:
                await self._refuse(message, error)
            except Exception as error:
                # A crashed agent is restarted by Faust past the record anyway: the record goes to
                # the dead letters with the error (a partial holds counts and digests only), so it
                # can be read and replayed, rather than lost with the agent's place.
                log.error(
                    "judge: partials partition %s offset %s not applied (%s)",
                    message.partition,
                    message.offset,
                    fault(error),
                )
                await self._dead_letter(message, f"judge: {fault(error)}", "judge_error")
            yield None

    async def _refuse(self, message: Any, error: KeyQuota) -> None:
        """A new key of a tenant at its quota: a dead letter, counted under its tenant, logged
        with the key's fingerprint (its tool's name may say what the tenant does)."""
        tenant = tenant_label(error.tenant)
        self.metrics.tenant_quota.labels(tenant, error.reason).inc()
        log.warning(
            "judge: tenant %s at its quota (%s): a new key %s refused",
            tenant,
            error.reason,
            key_fingerprint(message.key or b"", self.secret),
        )
        await self._dead_letter(message, str(error), error.reason)

    def _exit_unwritable(self, message: Any, error: PartitionsMismatch) -> None:
        """The table cannot be written: not this record's fault, and skipping it (as a record the
        judge cannot apply is skipped) would commit past it, its window never saved. Exit as a
        SIGKILL would, nothing acknowledged: the restart reads from the last commit again, with a
        fresh view of the changelog's partitions."""
        log.critical(
            "judge: the table cannot be written, exiting (status %s) so that a restart "
            "applies partials partition %s from offset %s again: %s",
            EXIT_TABLE_UNWRITABLE,
            message.partition,
            message.offset,
            error,
        )
        logging.shutdown()
        os._exit(EXIT_TABLE_UNWRITABLE)

    async def _apply(self, task: IncidentTask, key: bytes, partial: Tally) -> None:
        evicted, outcome = task.apply(key, partial, self.clock)
        if evicted is not None:
            await self._publish(evicted, self.clock)
        await self._publish(outcome, partial["ts"])

    def _close_quiet(self, task: IncidentTask) -> None:
        for outcome in task.close_quiet(self.clock):
            self.app.loop.create_task(self._publish(outcome, self.clock))

    async def _publish(self, outcome: Outcome, ts: float) -> None:
        for incident_id, record in outcome.incidents.items():
            await self.incidents.send(key=incident_id.encode(), value=orjson.dumps(record))
        for advisory in outcome.advisories:
            if self.advisory_key is not None:
                advisory = signed(advisory, self.advisory_key)
            events = self.tenant_events.get(advisory["tenant"], self.events)
            await events.send(key=advisory["run_id"].encode(), value=orjson.dumps(advisory))
            self.metrics.advisories.labels(advisory["incident"]).inc()
        for kind in outcome.opened:
            self.metrics.opened.labels(kind).inc()
            self.metrics.delay.observe(max(0.0, time.time() - ts))
        for kind in outcome.closed:
            self.metrics.closed.labels(kind).inc()

    def _held_partitions(self) -> set[int]:
        """The partials partitions (so the keys) this worker judges since the last rebalance."""
        return {
            tp.partition
            for tp in self.app.assignor.assigned_actives()
            if tp.topic == self.cfg.base.fleet_partials_topic
        }

    async def _on_assigned(self, app: faust.App, assigned: Any, **kwargs: Any) -> None:
        """Tasks of partitions given away are closed now, the others read again at the judge's
        next record (fleet/tasks.py)."""
        self.tasks.assigned(self._held_partitions())

    # The web view.

    def open_incidents(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """The open incidents of one tenant (None: the shared topic's runs, which name none) on
        the partitions this worker holds: a view lists no other tenant's."""
        found = []
        for task in self.tasks:
            for state in task.open_states():
                if state.get("tenant") != tenant:
                    continue
                for kind, incident in state.get("open", {}).items():
                    found.append(self.rules.record(state, kind, incident, None))
        return sorted(found, key=lambda r: (r["opened_at"], r["incident_id"]))

    def _views(self) -> None:
        service = self

        def refusal(view: faust.web.View, request: Any, tenant: str | None) -> Any:
            """None when the request may read the tenant's list; else the answer, the same
            whether the tenant exists or not."""
            if service.readers.allows(tenant, request.remote, request.headers.get("Authorization")):
                return None
            if service.readers.folder is None:
                return view.json({"error": "the incidents lists answer only to this host"}, status=403)
            return view.json(
                {"error": "send this list's reader token: `Authorization: Bearer <token>`"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="stallwatch-fleet"'},
            )

        class Incidents(faust.web.View):
            async def get(self, request: Any) -> Any:
                refused = refusal(self, request, None)
                if refused is not None:
                    return refused
                return self.json({"open": service.open_incidents()})

        class TenantIncidents(faust.web.View):
            async def get(self, request: Any, tenant: str) -> Any:
                refused = refusal(self, request, tenant)
                if refused is not None:
                    return refused
                return self.json({"open": service.open_incidents(tenant)})

        class Ready(faust.web.View):
            """Answers once the app has started its web server, with nothing of any tenant."""

            async def get(self, request: Any) -> Any:
                return self.json({"ready": True})

        class Metrics(faust.web.View):
            async def get(self, request: Any) -> Any:
                return self.bytes(
                    generate_latest(service.metrics.registry), content_type="text/plain; version=0.0.4"
                )

        self.app.page("/incidents/")(Incidents)
        self.app.page("/incidents/{tenant}/")(TenantIncidents)
        self.app.page("/health/ready")(Ready)
        self.app.page("/metrics")(Metrics)
