"""Log set-up for every stallwatch process, and aiokafka's retried complaints folded into a few lines.

aiokafka logs every failed retry at WARNING or ERROR: a worker wrote 173,554 lines in a 33 s broker
absence, and a normal start-up prints "Topic ... not found" and "Group Coordinator Request failed"
before the topics and the group settle. Those retried complaints are folded here into episodes: a
trouble shorter than its grace (start-up, a rebalance) leaves one INFO line with the count; a
longer one (the broker gone) gets one WARNING when it is noticed, a summary every
STALLWATCH_LOG_SUMMARY_S seconds while it lasts, and one WARNING when it has been quiet long enough
to be over. Every folded line is counted, by kind, in those lines. Anything else aiokafka says
(an unexpected error, an authorisation failure, a fatal join error) passes through untouched.

Settings: stallwatch.settings.LogSettings (STALLWATCH_LOG_LEVEL, _FORMAT, _SUMMARY_S, _KAFKA).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from stallwatch.settings import LogSettings

log = logging.getLogger("stallwatch.kafka.trouble")

# A broker that refuses connections for this long is gone, not blinking (one refused connect
# during a leader move would otherwise be announced as an outage).
UNREACHABLE_GRACE_S = 3.0
# Start-up and rebalances: topics being created, the group coordinator loading, leaders moving.
# They settle within seconds on a healthy cluster; past this, something is really missing.
NOT_READY_GRACE_S = 15.0
# No folded line for this long ends the episode: aiokafka retries every 0.1-2 s while the broker
# is away, so silence this long means its requests succeed again.
QUIET_S = 5.0
# How often the clock is checked while an episode is open (summaries and the end are this late).
TICK_S = 0.5
# Between summaries while a trouble lasts: enough to show it goes on, few enough to read.
DEFAULT_SUMMARY_S: float = LogSettings.model_fields["summary_s"].default

UNREACHABLE, NOT_READY = "broker unreachable", "not ready (topics, group coordinator, leaders)"

# aiokafka's retried complaints, by their format string (exact: a new aiokafka message is never
# folded by accident). Everything not listed passes through.
_KINDS: dict[str, str] = {
    'Unable connect to "%s:%s": %s': UNREACHABLE,
    'Unable to request metadata from "%s:%s": %s': UNREACHABLE,
    "Unable to request metadata from node with id %s: %r": UNREACHABLE,
    "Unable to update metadata from %s": UNREACHABLE,
    "Unable connect to node with id %s: %s": UNREACHABLE,
    "Cannot send %r to %s: %r": UNREACHABLE,
    "Could not send %r: %r": UNREACHABLE,
    "Error sending %s to node %s [%s] -- marking coordinator dead": UNREACHABLE,
    "Marking the coordinator dead (node %s)for group %s.": UNREACHABLE,
    "Heartbeat send request failed: %s. Will retry.": UNREACHABLE,
    "Heartbeat session expired - marking coordinator dead": UNREACHABLE,
    "Failed fetch messages from %s: %s": UNREACHABLE,
    # Logged, then raised to the caller (who retries): authorisation failures are raised apart.
    "FindCoordinator Request failed: %s": UNREACHABLE,
    "Topic %s not found in cluster metadata": NOT_READY,
    "Topic %s is not available during auto-create initialization": NOT_READY,
    "Group Coordinator Request failed: %s": NOT_READY,
    "Failed fetch offsets from %s: %s": NOT_READY,
    "No partition metadata for topic %s": NOT_READY,
    "No partition metadata for topic %r": NOT_READY,
    "OffsetFetchRequest -- unknown topic %s": NOT_READY,
    "Attempt to fetch offsets for partition %s failed due to: %s": NOT_READY,
    "Heartbeat failed for group %s because it is rebalancing": NOT_READY,
    "Heartbeat failed: local member_id was not recognized; resetting and re-joining group": NOT_READY,
    "Heartbeat failed for group %s: generation id is not  current.": NOT_READY,
    "Auto offset commit failed: %s": NOT_READY,
    "Got error produce response: %s": NOT_READY,
}
_GRACE = {UNREACHABLE: UNREACHABLE_GRACE_S, NOT_READY: NOT_READY_GRACE_S}
# aiokafka's loggers (and those of Faust's aiokafka driver): their records are judged here.
KAFKA_LOGGERS = ("aiokafka", "faust.transport.drivers.aiokafka")


# aiokafka's catch-all in its producer's sender: a broken connection while it looks up a
# coordinator ends there, traceback and all, once per outage per producer. Folded only when the
# broken connection is its cause; any other cause is a real surprise and passes through.
_SENDER_CATCH_ALL = "Unexpected error in sender routine"


def _caused_by_lost_connection(record: logging.LogRecord) -> bool:
    from aiokafka.errors import KafkaConnectionError

    exc = record.exc_info[1] if record.exc_info else None
    for _ in range(8):  # a cause chain is short; a cycle must not hang the logger
        if exc is None:
            return False
        if isinstance(exc, (KafkaConnectionError, ConnectionError)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _kind(record: logging.LogRecord) -> str | None:
    msg = record.msg
    if msg in _KINDS:
        return _KINDS[msg]
    if msg == _SENDER_CATCH_ALL:
        return UNREACHABLE if _caused_by_lost_connection(record) else None
    # Messages aiokafka builds from several string literals: matched on their fixed opening.
    if isinstance(msg, str) and msg.startswith(
        (
            "Heartbeat failed for group %s: coordinator",
            "Received unknown topic or partition error",
            "Got error produce response on topic-partition",
        )
    ):
        return NOT_READY
    return None


@dataclass
class Episode:
    """One stretch of retried complaints, from the first to the last folded line."""

    first_at: float
    first_line: str
    last_at: float = 0.0
    last_line: str = ""
    counts: Counter[str] = field(default_factory=Counter)
    # Per kind, the first and the latest time a line of it came: a kind is trouble only once its
    # lines span its grace (one stray refused connect, three seconds old, is no outage).
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    announced: bool = False
    summary_at: float = 0.0

    def folded(self) -> str:
        total = sum(self.counts.values())
        kinds = ", ".join(f"{n} {kind}" for kind, n in self.counts.most_common())
        return f"{total} aiokafka lines folded ({kinds})"


class KafkaTrouble(logging.Filter):
    """The filter on aiokafka's loggers: folds the retried complaints, lets the rest through."""

    def __init__(self, summary_s: float = DEFAULT_SUMMARY_S, clock=time.monotonic) -> None:
        super().__init__("stallwatch")
        self.summary_s = summary_s
        self.clock = clock
        self.episode: Episode | None = None
        self.total_folded = 0  # over the process's life, for tests and a final word
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        kind = _kind(record)
        if kind is None:
            return True
        now = self.clock()
        line = record.getMessage()
        with self._lock:
            if self.episode is None:
                self.episode = Episode(now, line)
            ep = self.episode
            ep.last_at, ep.last_line = now, line
            ep.counts[kind] += 1
            ep.spans[kind] = (ep.spans.get(kind, (now, now))[0], now)
            self.total_folded += 1
            if self._ticker is None:
                self._ticker = threading.Thread(
                    target=self._tick_while_open, daemon=True, name="stallwatch-kafka-trouble"
                )
                self._ticker.start()
        return False

    def _tick_while_open(self) -> None:
        while True:
            time.sleep(TICK_S)
            with self._lock:
                still_open = self.tick()
                if not still_open:
                    self._ticker = None
                    return

    def tick(self) -> bool:
        """Announce, summarise or close the open episode; False once none is open."""
        ep = self.episode
        if ep is None:
            return False
        now = self.clock()
        lasted = ep.last_at - ep.first_at
        if now - ep.last_at >= QUIET_S:
            self.episode = None
            if ep.announced:
                log.warning(
                    "Kafka answers again: no retried error for %.0f s, after %.0f s of trouble; %s",
                    QUIET_S,
                    lasted,
                    ep.folded(),
                )
            else:
                log.info(
                    "Kafka settled after %.1f s (start-up, rebalance or a short blip); %s",
                    lasted,
                    ep.folded(),
                )
            return False
        if not ep.announced and any(last - first >= _GRACE[k] for k, (first, last) in ep.spans.items()):
            ep.announced, ep.summary_at = True, now
            log.warning(
                "Kafka trouble for %.0f s: %s. aiokafka retries on its own; its repeats "
                "are folded here, with a summary every %.0f s and a line when it is over",
                now - ep.first_at,
                ep.first_line,
                self.summary_s,
            )
        elif ep.announced and now - ep.summary_at >= self.summary_s:
            ep.summary_at = now
            log.warning(
                "Kafka trouble goes on (%.0f s): %s; latest: %s", now - ep.first_at, ep.folded(), ep.last_line
            )
        return True


_installed: KafkaTrouble | None = None
_install_lock = threading.Lock()


def tame_kafka_loggers() -> KafkaTrouble:
    """Put the folding filter on every aiokafka logger (once per process; later calls only reach
    loggers created since). Called by the Kafka client and the worker when they start; a library
    user's own handlers see the folded lines like any other. STALLWATCH_LOG_KAFKA=raw turns it off."""
    global _installed
    import aiokafka.admin  # noqa: F401  (aiokafka's modules create their loggers on import)

    settings = LogSettings.from_env()
    with _install_lock:
        if _installed is None:
            _installed = KafkaTrouble(settings.summary_s)
        names = [
            n
            for n in list(logging.Logger.manager.loggerDict)
            if any(n == p or n.startswith(p + ".") for p in KAFKA_LOGGERS)
        ]
        if settings.kafka == "folded":
            for name in names:
                logger = logging.getLogger(name)
                if _installed not in logger.filters:
                    logger.addFilter(_installed)
        return _installed


class JsonLines(logging.Formatter):
    """One JSON object a line (time, level, logger, message, exception): what log pipelines parse."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def faust_logging_config(default_level: str = "INFO") -> dict[str, Any] | None:
    """The logging configuration for a Faust worker (the fleet app), which sets up logging itself:
    with STALLWATCH_LOG_FORMAT=json, its lines are JSON like every other process's (None: Faust's
    own text lines)."""
    settings = LogSettings.from_env()
    if settings.format != "json":
        return None
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonLines}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": sys.stderr}},
        "root": {"level": settings.level or default_level.upper(), "handlers": ["stderr"]},
    }


def configure(default_level: str = "INFO") -> None:
    """A process's logs (the worker, the demo, the benchmarks): STALLWATCH_LOG_LEVEL (else
    `default_level`: WARNING for tools that print their own output) and STALLWATCH_LOG_FORMAT on
    stderr, aiokafka's retried complaints folded. Messages name runs and partitions, never tool
    results."""
    settings = LogSettings.from_env()
    handler = logging.StreamHandler()
    fmt = settings.format or ("text" if sys.stderr.isatty() else "json")
    if fmt == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    level = settings.level or default_level.upper()
    logging.basicConfig(level=level, handlers=[handler], force=True)
    tame_kafka_loggers()
    if logging.getLevelName(level) > logging.DEBUG:
        # aiokafka's INFO is its group protocol step by step (a dozen lines a start-up); the
        # worker's own lines say when it serves which partitions.
        for name in KAFKA_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
