"""Liveness from the consume loop's progress, readiness from restored state, and a watchdog."""

from __future__ import annotations

import logging
import os
import threading
import time

from aiohttp import web

from stallwatch_streams.worker.progress import Signs

log = logging.getLogger(__name__)

# Exit status of a worker that stopped making progress (distinct from a crash's 1).
STALLED_EXIT_CODE = 3


class HealthServer:
    """`/health/live`: 200 while the loop completed an iteration within the stall timeout, else 503
    (an open port alone proves nothing: a hung loop still answers). `/health/ready`: 200 once every
    tenant's first assignment is restored (`AllProgress.ready`), and from then on."""

    def __init__(self, progress: Signs, stall_timeout_s: float, host: str, port: int) -> None:
        self.progress = progress
        self.stall_timeout_s = stall_timeout_s
        self.host, self.port = host, port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/health/live", self._live)
        app.router.add_get("/health/ready", self._ready)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _live(self, request: web.Request) -> web.Response:
        stalled = self.progress.stalled_for()
        ok = stalled < self.stall_timeout_s
        return web.json_response(
            {"live": ok, "seconds_since_progress": round(stalled, 3)}, status=200 if ok else 503
        )

    async def _ready(self, request: web.Request) -> web.Response:
        ready = self.progress.ready
        return web.json_response({"ready": ready}, status=200 if ready else 503)


def start_watchdog(progress: Signs, stall_timeout_s: float) -> threading.Thread:
    """A thread, so that it fires even when the event loop itself is blocked: a worker with no
    progress for twice the stall timeout exits, and its partitions move to a live worker. Twice:
    an orchestrator probing /health/live sees the stall first and restarts the worker its own way;
    the watchdog is the backstop where nothing probes."""

    def watch() -> None:
        while True:
            time.sleep(min(1.0, stall_timeout_s / 4))
            stalled = progress.stalled_for()
            if stalled > 2 * stall_timeout_s:
                log.critical(
                    "no progress for %.1f s (stall timeout %.1f s); exiting", stalled, stall_timeout_s
                )
                logging.shutdown()
                os._exit(STALLED_EXIT_CODE)

    thread = threading.Thread(target=watch, name="stallwatch-watchdog", daemon=True)
    thread.start()
    return thread
