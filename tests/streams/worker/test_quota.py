"""Live runs per tenant and per partition: a flood of run ids is refused at the quota, its calls
still allowed; other runs and decisions untouched; the ledger kept across batches, ends, expiry
and a successor's restore. A tenant's runs are on its own topic (the shared topic refuses an event
naming a tenant), so a tenant's partition holds that tenant's ledger."""

from __future__ import annotations

import orjson

from stallwatch.contract.commands import encode_command
from stallwatch.engine.detector import Detector
from stallwatch.engine.quota import LiveRuns, RunQuota
from stallwatch.engine.state import RunState
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage
from stallwatch_streams.worker.store import PartitionStates
from tests.engine.test_hostile_input import healthy_runs, interleaved, replayed
from tests.script import RunScript

QUOTA = RunQuota(per_tenant=3, total=5)


class Partition:
    """One partition served by the batch step, its states kept as a worker's task keeps them."""

    def __init__(
        self, quota: RunQuota = QUOTA, idle_timeout_s: float = float("inf"), tenant: str | None = None
    ) -> None:
        self.store = PartitionStates(quota=quota)
        topic = "stallwatch.events" if tenant is None else f"stallwatch.tenant.{tenant}.events"
        self.applier = BatchApplier(Detector(), topic, idle_timeout_s=idle_timeout_s, tenant=tenant)
        self.offset = 0
        self.commands: list[dict] = []
        self.letters: list[tuple[bytes | None, str, str]] = []

    def feed(self, lines: list[bytes], append_ms: int = 0) -> None:
        batch = []
        for line in lines:
            batch.append(
                SourceMessage(
                    orjson.loads(line)["run_id"].encode(), line, 0, self.offset, timestamp=append_ms
                )
            )
            self.offset += 1
        result = self.applier.apply(batch, self.store.load, self.store.clock, 0.0, self.store.live)
        for run_id, state in result.states.items():
            self.store.put(run_id, state)
        self.commands += [orjson.loads(encode_command(c)) for c in result.commands]
        self.letters += [
            (key, reason, orjson.loads(letter)["error"]) for key, letter, reason in result.letters
        ]


def tenant_run(tenant: str, n: int) -> RunScript:
    """A run for `tenant`'s topic, or for the shared topic: it names no tenant either way."""
    s = RunScript(f"{tenant}-{n}")
    s.round_of(("search", {"q": n}, {"items": [n]}))
    return s


def test_a_tenant_past_its_quota_is_refused_and_its_calls_still_run():
    partition = Partition(tenant="a")
    flood = [tenant_run("a", n) for n in range(5)]
    partition.feed(interleaved(*flood))
    refused = [key for key, reason, _ in partition.letters if reason == "run_quota"]
    assert refused == [b"a-3", b"a-4"]
    assert "STALLWATCH_MAX_LIVE_RUNS_PER_TENANT" in partition.letters[0][2]
    verdicts = {c["run_id"]: c for c in partition.commands if c["type"] == "verdict"}
    assert verdicts["a-4"]["decision"] == "allow" and "no record" in verdicts["a-4"]["reason"]


def test_the_shared_topic_is_bounded_by_the_partitions_total():
    partition = Partition()
    partition.feed(interleaved(*(tenant_run("s", n) for n in range(6))))
    assert [key for key, reason, _ in partition.letters if reason == "run_quota"] == [b"s-5"]
    assert "STALLWATCH_MAX_LIVE_RUNS" in partition.letters[-1][2]


def test_other_runs_decide_as_without_the_flood():
    partition = Partition(RunQuota(per_tenant=2, total=100))
    flood = [tenant_run("a", n) for n in range(10)]
    healthy = healthy_runs(4)
    partition.feed(interleaved(*flood, *healthy))
    alone, _ = replayed(interleaved(*healthy_runs(4)))
    mine = [c for c in partition.commands if c["run_id"].startswith("healthy")]
    assert mine == alone


def test_an_ended_run_frees_its_place_and_a_successor_counts_the_same():
    partition = Partition(tenant="a")
    runs = [tenant_run("a", n) for n in range(3)]
    partition.feed(interleaved(*runs))
    runs[0].end()
    partition.feed([orjson.dumps(runs[0].events[-1])])
    partition.feed(interleaved(tenant_run("a", 3)))
    assert partition.letters == []
    assert partition.store.live.by_tenant == {"a": 3}
    successor = PartitionStates(
        {run: state.to_bytes() for run, state in partition.store.states()}, quota=QUOTA
    )
    assert successor.live is not None
    assert successor.live.by_tenant == {"a": 3} and successor.live.total == 3


def test_an_expired_run_frees_its_place_replaced_or_deleted():
    partition = Partition(idle_timeout_s=60, tenant="a")
    runs = [tenant_run("a", n) for n in range(3)]
    partition.feed(interleaved(*runs), append_ms=1_000)
    again = tenant_run("a", 0)  # the same run id, long after: a new run in the expired one's place
    partition.feed(interleaved(again), append_ms=1_000_000)
    assert partition.letters == [] and partition.store.live.by_tenant == {"a": 3}
    partition.store.delete("a-1")  # what the expiry scan does
    partition.feed(interleaved(tenant_run("a", 9)), append_ms=1_000_000)
    assert partition.letters == [] and partition.store.live.total == 3


def test_the_ledger_reads_a_stored_state_without_building_it():
    state = RunState(mode="researcher", started_ts=1.0, tenant="t")
    assert RunState.tenant_and_ended(state.to_bytes()) == ("t", False)
    state.release()
    assert RunState.tenant_and_ended(state.to_bytes()) == ("t", True)
    live = LiveRuns(QUOTA)
    live.add(None)
    live.remove(None)
    assert live.by_tenant == {} and live.total == 0


def test_a_quarantined_run_that_ends_frees_its_place(monkeypatch):
    from stallwatch.engine.rules.researcher import ResearcherRules
    from tests.streams.worker import injected_bug

    monkeypatch.setattr(ResearcherRules, "refusal", injected_bug.with_bug(ResearcherRules.refusal))
    partition = Partition(tenant="a")
    run = tenant_run("a", 0)
    run.round_of((injected_bug.TOOL, {"q": 1}, "r"))  # the engine fails: quarantined
    run.end()
    partition.feed(interleaved(run))
    assert [reason for _, reason, _ in partition.letters] == ["engine_fault"]
    state = partition.store.load("a-0")
    assert state.quarantined and state.ended
    assert partition.store.live.by_tenant == {}


def test_a_state_the_ledger_cannot_read_is_counted_and_left_to_the_batch_step():
    readable = RunState(mode="researcher", started_ts=1.0, tenant="t").to_bytes()
    store = PartitionStates(
        {"a": readable, "b": orjson.dumps([99, "a format of another version"])}, quota=QUOTA
    )
    assert store.live is not None and store.live.by_tenant == {"t": 1, None: 1}


# -- bytes --------------------------------------------------------------------------------------


def wide_run(tenant: str, n: int, results: int = 40) -> RunScript:
    """A run that holds many digests: `results` distinct results of 10 items each."""
    s = RunScript(f"{tenant}-wide-{n}")
    for r in range(results):
        s.round_of(("search", {"q": r}, {"items": [f"{n}-{r}-{i}" for i in range(10)]}))
    return s


def test_a_tenant_whose_runs_hold_its_bytes_is_refused_new_runs_and_its_calls_still_run():
    budget = 24_000
    partition = Partition(RunQuota(per_tenant=1_000, total=1_000, bytes_per_tenant=budget), tenant="a")
    for n in range(8):  # one after another: each run's bytes are held before the next starts
        partition.feed(interleaved(wide_run("a", n)))
    live = partition.store.live
    assert live is not None
    refused = [key for key, reason, _ in partition.letters if reason == "memory_quota"]
    assert refused, "runs past the tenant's bytes are refused"
    assert "STALLWATCH_MAX_STATE_BYTES_PER_TENANT" in partition.letters[0][2]
    held = [run for run, _ in partition.store.states()]
    # The ledger charges each live run its state's estimate, and the refusals began at the budget.
    assert live.bytes_by_tenant["a"] == sum(
        state.approx_bytes() + live.charged[run][2] for run, state in partition.store.states()
    )
    assert live.bytes_by_tenant["a"] - max(s.approx_bytes() for _, s in partition.store.states()) < budget
    verdicts = [c for c in partition.commands if c["type"] == "verdict" and c["run_id"].encode() in refused]
    assert verdicts and all(v["decision"] == "allow" for v in verdicts)
    assert len(held) == 8 - len(refused)


def test_an_ended_run_frees_its_bytes_and_a_successor_charges_the_stored_states():
    partition = Partition(RunQuota(per_tenant=1_000, total=1_000, bytes_per_tenant=10_000_000), tenant="a")
    runs = [wide_run("a", n, results=5) for n in range(3)]
    partition.feed(interleaved(*runs))
    live = partition.store.live
    assert live is not None
    before = live.bytes_by_tenant["a"]
    runs[0].end()
    partition.feed([orjson.dumps(runs[0].events[-1])])
    assert 0 < live.bytes_by_tenant["a"] < before and "a-wide-0" not in live.charged
    successor = PartitionStates(
        {run: state.to_bytes() for run, state in partition.store.states()}, quota=QUOTA
    )
    assert successor.live is not None and set(successor.live.charged) == {"a-wide-1", "a-wide-2"}
    successor.delete("a-wide-1")
    assert set(successor.live.charged) == {"a-wide-2"} and successor.live.bytes_by_tenant["a"] > 0


def test_a_state_at_every_cap_is_estimated_near_what_it_holds():
    from stallwatch.engine.rules.workspace import MAX_CALL_HISTORY
    from stallwatch.engine.state import MAX_FINGERPRINTS, MAX_SIGNATURES

    state = RunState(mode="coder", started_ts=1.0)
    state.signatures = dict.fromkeys(n.to_bytes(16, "big") for n in range(MAX_SIGNATURES))
    state.fingerprints = dict.fromkeys(n.to_bytes(16, "big") for n in range(MAX_FINGERPRINTS))
    state.call_history = {f"{n:032x}": [f"{n:032x}", 1, 2, 0] for n in range(MAX_CALL_HISTORY)}
    # docs/operations.md: a run at every cap holds about 0.66 MB (tracemalloc).
    assert 500_000 < state.approx_bytes() < 800_000


def test_the_byte_quota_defaults_to_the_settings_default():
    from stallwatch.settings import Settings

    assert RunQuota(1, 1).bytes_per_tenant == Settings.model_fields["max_state_bytes_per_tenant"].default
