"""What the real-agent tests share: the agents installed once (deploy/agents/install.sh), a
loopback site per fake model and per server, and a service that keeps the runs it ends."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from stallwatch.client import EmbeddedClient
from stallwatch.client.run import Client, Run
from stallwatch.serve.service import Service
from tests.serve.conftest import bound_port

ROOT = Path(__file__).resolve().parents[3]
STALLWATCH = str(Path(sys.executable).with_name("stallwatch"))


def install(agent: str) -> str:
    """The agent's executable, installed from npm into .cache/agents/ on first use."""
    out = subprocess.run(
        [str(ROOT / "deploy" / "agents" / "install.sh"), agent],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return out.stdout.strip().splitlines()[-1]


class RecordingService(Service):
    """Keeps the runs it forgets (the agents end their sessions, and with them the runs)."""

    def __init__(self, client: Client | None = None) -> None:
        super().__init__(client or EmbeddedClient())
        self.runs: dict[str, Run] = {}

    def forget(self, run_id: str) -> None:
        if run_id in self.held:
            self.runs[run_id] = self.held[run_id].run
        super().forget(run_id)

    def only_run(self) -> Run:
        runs = {**self.runs, **{r: h.run for r, h in self.held.items()}}
        assert len(runs) == 1, runs
        return next(iter(runs.values()))


@contextlib.asynccontextmanager
async def site(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{bound_port(runner)}"
    finally:
        await runner.cleanup()
