"""Where a small transaction's time goes: records acknowledged, the group offsets added, the commit.

    python benchmarks/txn_phases.py [--transactions 300]

One transactional producer as the worker configures it (the project's Producer: 2 ms
CONCURRENT_TRANSACTIONS backoff; 5 ms retry backoff, linger 0) writes transactions of two records
(a command and a state) back to back, with and without the input offsets (AddOffsetsToTxn +
TxnOffsetCommit, sent after the records as the worker does), alternating twice; then aiokafka's
own producer, configured alike, as the baseline (aiokafka's 20 ms backoff). Prints p50/p99 of each
phase's end since the transaction began. Cited by benchmarks/README.md (verdict latency).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch.kafka.aiokafka_patch import Producer
from stallwatch_streams.worker.producers import RETRY_BACKOFF_MS


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1e3


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=300)
    args = parser.parse_args()
    bootstrap = os.environ.get("STALLWATCH_BOOTSTRAP", "127.0.0.1:9092")
    name = f"txn-{uuid.uuid4().hex[:6]}"
    topics = [f"{name}.commands", f"{name}.changelog", f"{name}.events"]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(t, 1, 1) for t in topics])
    source = TopicPartition(topics[2], 0)
    print(f"broker {bootstrap}; {args.transactions} transactions of 2 records each, per variant")
    try:
        for kind in (Producer, AIOKafkaProducer):
            print(kind.__module__.split(".")[0], kind.__name__, flush=True)
            await phases(kind, bootstrap, name, topics, source, args.transactions)
    finally:
        await admin.delete_topics(topics)
        await admin.close()


async def phases(
    kind: type[AIOKafkaProducer],
    bootstrap: str,
    name: str,
    topics: list[str],
    source: TopicPartition,
    transactions: int,
) -> None:
    producer = kind(
        bootstrap_servers=bootstrap, transactional_id=name, linger_ms=0, retry_backoff_ms=RETRY_BACKOFF_MS
    )
    await producer.start()
    try:
        for with_offsets in (False, True, False, True):
            acked, offsets, committed = [], [], []
            for i in range(transactions):
                began = time.perf_counter()
                async with producer.transaction():
                    await asyncio.gather(
                        await producer.send(topics[0], b"command", key=b"run", partition=0),
                        await producer.send(topics[1], b"state", key=b"run", partition=0),
                    )
                    acked.append(time.perf_counter() - began)
                    if with_offsets:
                        await producer.send_offsets_to_transaction({source: i + 1}, name)
                    offsets.append(time.perf_counter() - began)
                committed.append(time.perf_counter() - began)
            label = "records + offsets" if with_offsets else "records only"
            print(
                f"{label:<18} acked p50 {pct(acked, 50):5.1f} p99 {pct(acked, 99):6.1f} ms | "
                f"offsets in p50 {pct(offsets, 50):5.1f} p99 {pct(offsets, 99):6.1f} ms | "
                f"committed p50 {pct(committed, 50):5.1f} p99 {pct(committed, 99):6.1f} ms",
                flush=True,
            )
    finally:
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(main())
