"""Live runs counted per tenant, in runs and in bytes, so that memory stays bounded whatever run
ids arrive and whatever each run holds.

A worker keeps one ledger per partition (its states are per partition): a `run_started` of a
new run is refused, as a dead letter, when its tenant already has `per_tenant` live runs on the
partition, or the partition has `total`. Runs that name no tenant (a deployment of one team)
are bounded by `total` alone. Each live run is charged its state's estimated bytes in memory
(`RunState.approx_bytes`, plus its declarations), updated as its events are applied; a new run
of a tenant whose runs already hold `bytes_per_tenant` is refused too (`memory_quota`). A live
run is one whose state is held and not ended;
an ended run keeps only a small tombstone and an expired one is deleted, and both free their
place. Counted on the partition's own log, the ledger answers the same however the log is cut
into batches, and a successor rebuilds it from the restored states. Replay keeps no ledger, as
it expires nothing: it answers as a worker without limits would.
"""

from __future__ import annotations

from dataclasses import dataclass

from stallwatch.contract.parse import InvalidEvent

# A run's declarations in memory per byte of their JSON (measured with tracemalloc: about 2.5 for
# tools with volatile fields, patterns and facts, which the state keeps as parsed).
DECLARED_BYTES_FACTOR = 3
# A restored state in memory per byte of its changelog record, until its run's next event
# charges it exactly (a state at every cap: ~0.66 MB in memory, ~0.5 MB stored).
STORED_BYTES_FACTOR = 1.5


@dataclass(frozen=True, slots=True)
class RunQuota:
    """The limits of one partition's live runs (Settings.max_live_runs_per_tenant, _total)."""

    per_tenant: int
    total: int
    # Estimated bytes in memory of one tenant's live runs on the partition (runs that name no
    # tenant count as one tenant): Settings.max_state_bytes_per_tenant.
    bytes_per_tenant: int = 128 << 20


class LiveRuns:
    """One partition's live runs by tenant (None: runs that name none)."""

    __slots__ = ("by_tenant", "bytes_by_tenant", "charged", "quota", "total")

    def __init__(self, quota: RunQuota) -> None:
        self.quota = quota
        self.by_tenant: dict[str | None, int] = {}
        self.total = 0
        # Estimated bytes of each tenant's live runs, and what each run is charged now:
        # run id -> (tenant, bytes of its state, bytes of its declarations).
        self.bytes_by_tenant: dict[str | None, int] = {}
        self.charged: dict[str, tuple[str | None, int, int]] = {}

    def refusal(self, tenant: str | None) -> InvalidEvent | None:
        """The dead letter's error for a new run of `tenant` over its quota, or None."""
        held = self.by_tenant.get(tenant, 0)
        held_bytes = self.bytes_by_tenant.get(tenant, 0)
        if held_bytes >= self.quota.bytes_per_tenant:
            return InvalidEvent(
                "memory_quota",
                f"its tenant's live runs already hold about {held_bytes >> 20:,} MiB on this partition, "
                "the quota (STALLWATCH_MAX_STATE_BYTES_PER_TENANT); end runs with run_ended, or "
                "raise the quota with the workers' memory",
            )
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

    def charge(self, run_id: str, tenant: str | None, state_bytes: int, declared: int | None = None) -> None:
        """Charge a live run its state's bytes now (`declared`: its declarations' bytes, given at
        its start and kept until then)."""
        before = self.charged.get(run_id)
        if before is not None:
            self._add_bytes(before[0], -(before[1] + before[2]))
            if declared is None:
                declared = before[2]
        declared = declared or 0
        self.charged[run_id] = (tenant, state_bytes, declared)
        self._add_bytes(tenant, state_bytes + declared)

    def discharge(self, run_id: str) -> None:
        """The run ended or is gone: its bytes are free."""
        before = self.charged.pop(run_id, None)
        if before is not None:
            self._add_bytes(before[0], -(before[1] + before[2]))

    def _add_bytes(self, tenant: str | None, delta: int) -> None:
        held = self.bytes_by_tenant.get(tenant, 0) + delta
        if held > 0:
            self.bytes_by_tenant[tenant] = held
        else:
            self.bytes_by_tenant.pop(tenant, None)

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
