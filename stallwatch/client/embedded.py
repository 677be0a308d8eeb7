"""The in-process engine behind the client's interface: one agent, no Kafka."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stallwatch.client.run import Client
from stallwatch.contract.parse import validate_event
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import derive_secret
from stallwatch.engine.fleet import Fleet

if TYPE_CHECKING:
    from stallwatch.metrics import StallwatchMetrics


class EmbeddedClient(Client):
    """Same calls as KafkaClient; events are applied at once and verdicts come back at once."""

    verdict_timeout_s = 1.0  # never reached: verdicts are delivered before `propose` waits

    def __init__(self, admin_policy: AdminPolicy | None = None,
                 metrics: StallwatchMetrics | None = None, fingerprint_key: str | None = None,
                 args_digest_only: bool = False) -> None:
        """`metrics`: a `stallwatch.metrics.StallwatchMetrics` to keep the workers' counters;
        `fingerprint_key` keys every digest (as STALLWATCH_FINGERPRINT_KEY does for workers)."""
        super().__init__()
        self.fingerprint_secret = derive_secret(fingerprint_key) if fingerprint_key else None
        self.args_digest_only = args_digest_only
        self.fleet = Fleet(admin_policy, metrics=metrics, secret=self.fingerprint_secret)

    async def __aenter__(self) -> EmbeddedClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def forget(self, run_id: str) -> None:
        """Drop a finished run, its tombstone included: memory stays bounded in a long process."""
        super().forget(run_id)
        self.fleet.runs.pop(run_id, None)

    async def _send(self, event: dict[str, Any]) -> None:
        run = self.runs.get(event["run_id"])
        for command in self.fleet.handle(validate_event(event)):
            if run is not None:
                run.deliver(command)
