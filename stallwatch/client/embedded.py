"""The in-process engine behind the client's interface: one agent, no Kafka."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stallwatch.client.run import Client
from stallwatch.contract.commands import Command
from stallwatch.contract.parse import validate_event
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import derive_secret
from stallwatch.engine.embedded import Counters, EmbeddedEngine


class EmbeddedClient(Client):
    """Same calls as KafkaClient; events are applied at once and verdicts come back at once."""

    verdict_timeout_s = 1.0  # never reached: verdicts are delivered before `propose` waits
    runs_inline = True  # no I/O: every call completes without waiting

    def __init__(
        self,
        admin_policy: AdminPolicy | None = None,
        metrics: Counters | None = None,
        fingerprint_key: str | None = None,
        args_digest_only: bool = False,
    ) -> None:
        """`metrics`: any `Counters` (stallwatch-streams' `stallwatch_streams.metrics.StallwatchMetrics`
        keeps the workers' Prometheus counters); `fingerprint_key` keys every digest (as
        STALLWATCH_FINGERPRINT_KEY does for workers)."""
        super().__init__()
        self.fingerprint_secret = derive_secret(fingerprint_key) if fingerprint_key else None
        self.args_digest_only = args_digest_only
        self.engine = EmbeddedEngine(admin_policy, metrics=metrics, secret=self.fingerprint_secret)
        # A run's events, applied at once. A Run builds them conforming to the contract (it
        # checks the arguments they are made of), so they skip validation, which would cost a
        # sixth of a call's time in-process; run_started, with the caller's tools, goes
        # through `_send` and is validated there.
        self._apply: Callable[[dict[str, Any]], list[Command]] = self.engine.handle

    def observes(self, tenant: str | None) -> bool:
        return self.engine.detector.admin_policy.observes(tenant)

    async def __aenter__(self) -> EmbeddedClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def forget(self, run_id: str) -> None:
        """Drop a finished run, its tombstone included: memory stays bounded in a long process."""
        super().forget(run_id)
        self.engine.runs.pop(run_id, None)

    async def advise(self, advisory: dict[str, Any]) -> None:
        """Apply an event from outside the run, as the fleet app writes it (a `fleet_advisory`):
        validated, applied, and its nudge delivered to the run's `nudges`."""
        await self._send(advisory)

    async def _send(self, event: dict[str, Any]) -> None:
        run = self.runs.get(event["run_id"])
        for command in self.engine.handle(validate_event(event, self.engine.detector.secret)):
            if run is not None:
                run.deliver(command)
