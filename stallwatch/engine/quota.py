"""Live runs counted per tenant, so that memory stays bounded whatever run ids arrive.

A worker keeps one ledger per partition (its states are per partition): a `run_started` of a
new run is refused, as a dead letter, when its tenant already has `per_tenant` live runs on the
partition, or the partition has `total`. Runs that name no tenant (a deployment of one team)
are bounded by `total` alone. A live run is one whose state is held and not ended;
an ended run keeps only a small tombstone and an expired one is deleted, and both free their
place. Counted on the partition's own log, the ledger answers the same however the log is cut
into batches, and a successor rebuilds it from the restored states. Replay keeps no ledger, as
it expires nothing: it answers as a worker without limits would.
"""

from __future__ import annotations

from dataclasses import dataclass

from stallwatch.contract.parse import InvalidEvent


@dataclass(frozen=True, slots=True)
class RunQuota:
    """The limits of one partition's live runs (Settings.max_live_runs_per_tenant, _total)."""

    per_tenant: int
    total: int


class LiveRuns:
    """One partition's live runs by tenant (None: runs that name none)."""

    __slots__ = ("by_tenant", "quota", "total")

    def __init__(self, quota: RunQuota) -> None:
        self.quota = quota
        self.by_tenant: dict[str | None, int] = {}
        self.total = 0

    def refusal(self, tenant: str | None) -> InvalidEvent | None:
        """The dead letter's error for a new run of `tenant` over its quota, or None."""
        held = self.by_tenant.get(tenant, 0)
        if tenant is not None and held >= self.quota.per_tenant:
            return InvalidEvent(
                "run_quota",
                f"its tenant already has {held:,} live runs on this "
                f"partition, the quota (STALLWATCH_MAX_LIVE_RUNS_PER_TENANT); "
                "end runs with run_ended, or raise the quota",
            )
        if self.total >= self.quota.total:
            return InvalidEvent(
                "run_quota",
                f"this partition already holds {self.total:,} live "
                "runs, its limit (STALLWATCH_MAX_LIVE_RUNS); add partitions and "
                "workers, or raise the limit",
            )
        return None

    def add(self, tenant: str | None) -> None:
        self.by_tenant[tenant] = self.by_tenant.get(tenant, 0) + 1
        self.total += 1

    def remove(self, tenant: str | None) -> None:
        held = self.by_tenant.get(tenant, 0) - 1
        if held > 0:
            self.by_tenant[tenant] = held
        else:
            self.by_tenant.pop(tenant, None)
        self.total = max(0, self.total - 1)
