"""`stallwatch worker`: create the topics, serve until SIGTERM, exit non-zero on any failure."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import threading
from collections.abc import Iterator

from stallwatch.contract.advisories import advisory_key_of
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import secret_from_key
from stallwatch.engine.detector import Detector
from stallwatch.kafka.topics import ensure_topics
from stallwatch.logs import configure as configure_logging
from stallwatch.settings import Settings, SetupError, reveal
from stallwatch_streams.metrics import StallwatchMetrics
from stallwatch_streams.worker.health import HealthServer, start_watchdog
from stallwatch_streams.worker.store import UnreadablePosition
from stallwatch_streams.worker.tenants import Tenants

log = logging.getLogger("stallwatch_streams.worker")

# A clean stop (leave the group, close the producers) gets this long; a stuck one is cut short,
# which is safe: everything committed is in Kafka, everything else is read again.
STOP_TIMEOUT_S = 10.0
# Of the stop's time, what is kept for the health server and the event loop's own shutdown.
STOP_MARGIN_S = 1.0
# Exit status of a stop that abandoned a batch in flight (its events are read again by the next
# owner): distinct from a crash's 1, a set-up error's 2 and a stall's 3.
ABANDONED_EXIT_CODE = 4


@contextlib.contextmanager
def _port_setting(name: str, host: str, port: int) -> Iterator[None]:
    """A port already taken (another worker on this machine) names the setting to change."""
    try:
        yield
    except OSError as exc:
        raise SetupError(
            f"cannot listen on {host}:{port} ({exc.strerror}): set {name} to a free port (0 picks one)"
        ) from None


def main(settings: Settings) -> int:
    configure_logging()
    freeze_startup_heap()
    deadline = StopDeadline(STOP_TIMEOUT_S)
    try:
        return asyncio.run(serve(settings, deadline=deadline))
    finally:
        deadline.disarm()  # the loop's shutdown is over too


async def serve(
    settings: Settings, metrics: StallwatchMetrics | None = None, deadline: StopDeadline | None = None
) -> int:
    """Run one worker until SIGTERM/SIGINT (exit 0) or a failure (exit 1)."""
    settings = settings.for_tenant(None)  # a worker serves every tenant; STALLWATCH_TENANT is a runtime's
    policy = AdminPolicy.of(settings)  # a bad file stops the worker before Kafka
    await ensure_topics(settings)
    if settings.advisory_key is None:
        log.warning(
            "STALLWATCH_ADVISORY_KEY is not set: every fleet_advisory on an events topic counts, "
            "whoever wrote it; with tenants, set the fleet app's key on every worker"
        )
    metrics = metrics or StallwatchMetrics()
    with _port_setting("STALLWATCH_METRICS_PORT", settings.metrics_bind, settings.metrics_port):
        metrics.serve(settings.metrics_port, settings.metrics_bind)
    tenants = Tenants(
        settings,
        metrics,
        Detector(
            policy,
            secret_from_key(reveal(settings.fingerprint_key)),
            advisory_key_of(reveal(settings.advisory_key)),
        ),
    )
    health = HealthServer(tenants.progress, settings.stall_timeout_s, settings.web_bind, settings.web_port)
    stopping = asyncio.Event()
    deadline = deadline or StopDeadline(STOP_TIMEOUT_S)

    def on_signal() -> None:
        stopping.set()
        deadline.arm()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    with _port_setting("STALLWATCH_WEB_PORT", settings.web_bind, settings.web_port):
        await health.start()
    await tenants.start()
    start_watchdog(tenants.progress, settings.stall_timeout_s)
    log.info(
        "worker ready: group %s, topic %s, tenants %s",
        settings.group_id,
        settings.events_topic,
        sorted(t for t in tenants.pipelines if t is not None),
    )
    consuming = asyncio.create_task(tenants.run(), name="stallwatch-tenants")
    stop_requested = asyncio.create_task(stopping.wait())
    await asyncio.wait({consuming, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
    deadline.arm()
    code = 0
    if consuming.done():
        failure = consuming.exception()
        if isinstance(failure, UnreadablePosition):
            # The operator's to act on (a rollback too far), not a fault: one line, no traceback.
            log.critical("%s; exiting", failure)
        else:
            log.critical("the pipeline failed; exiting so that the batch is read again", exc_info=failure)
        code = 1
    else:
        consuming.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consuming
    stop_requested.cancel()
    # A stop within the deadline, with a margin for what follows: the health server, the loop's
    # own shutdown.
    if not await tenants.stop(STOP_TIMEOUT_S - STOP_MARGIN_S):
        code = code or ABANDONED_EXIT_CODE
    await health.stop()
    log.info("worker stopped (exit %d)", code)
    deadline.code = code
    return code


def freeze_startup_heap() -> None:
    """What is alive when the worker process starts (modules, classes, settings) lives as long as
    the worker: kept out of the cyclic collector's full collections, which walk every
    tracked object while holding the interpreter's lock from every tenant (33-99 ms each on a
    worker under load, 2-5 ms with the start's objects frozen). Nothing of a tenant is frozen:
    its states come and go, and a frozen cycle is never collected."""
    gc.collect()
    gc.freeze()


class StopDeadline:
    """From a stop signal, the process ends within `seconds` whatever it waits on: a thread,
    so that it fires even if a task ignores its cancellation or the loop's own shutdown waits
    on a broker that does not answer (a stuck worker otherwise ignored SIGTERM for 90 s)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.code = ABANDONED_EXIT_CODE  # until the stop finishes and says how it went
        self._armed = False
        self._over = threading.Event()

    def arm(self) -> None:
        if self._armed:
            return
        self._armed = True
        threading.Thread(target=self._expire, name="stallwatch-stop-deadline", daemon=True).start()

    def disarm(self) -> None:
        """The stop is over, the loop closed: nothing left to cut short."""
        self._over.set()

    def _expire(self) -> None:
        if self._over.wait(self.seconds):
            return
        log.warning("the worker did not stop within %.0f s; exiting (exit %d)", self.seconds, self.code)
        logging.shutdown()
        os._exit(self.code)
