"""The floor for a Python exactly-once loop: a bare aiokafka transactional consume-produce echo.

    python benchmarks/txn_echo.py BOOTSTRAP INPUT OUTPUT GROUP [--opt key=value ...]

One member of consumer group GROUP: each fetched batch of INPUT is copied to the same partition
of OUTPUT in one transaction with its offsets, as the decision worker commits. On any Kafka error
the consumer and producer start again from the committed offsets, as a restarted worker would
(the least any exactly-once loop must do). The group's session and the transaction's timeout are
the worker's, so that a member killed with SIGKILL costs the echo what it costs the workers.
`--opt` adds client options (e.g. request_timeout_ms=5000) to both the consumer and the producer.
Runs until SIGTERM or SIGKILL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch_streams.worker.pipeline import SESSION_TIMEOUT_MS
from stallwatch_streams.worker.producers import TRANSACTION_TIMEOUT_MS


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs as aiokafka keyword arguments (numbers as int)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        options[key] = int(value) if value.lstrip("-").isdigit() else value
    return options


async def echo(
    bootstrap: str, source: str, output: str, group: str, stop: asyncio.Event, options: dict[str, Any]
) -> None:
    while not stop.is_set():
        with contextlib.suppress(KafkaError):
            await _echo_until_error(bootstrap, source, output, group, stop, options)


async def _echo_until_error(
    bootstrap: str, source: str, output: str, group: str, stop: asyncio.Event, options: dict[str, Any]
) -> None:
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=2000,
        **options,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=0,
        transactional_id=f"{group}-{uuid.uuid4().hex[:8]}",
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        **options,
    )
    try:
        await consumer.start()
        await producer.start()
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=100, max_records=4000)
            if not batches:
                continue
            async with producer.transaction():
                for tp, records in batches.items():
                    for r in records:
                        await producer.send(output, r.value, key=r.key, partition=tp.partition)
                await producer.send_offsets_to_transaction(
                    {tp: records[-1].offset + 1 for tp, records in batches.items()}, group
                )
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
        with contextlib.suppress(Exception):
            await consumer.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap")
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("group")
    parser.add_argument("--opt", action="append", default=[])
    args = parser.parse_args()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await echo(args.bootstrap, args.source, args.output, args.group, stop, parse_options(args.opt))


if __name__ == "__main__":
    asyncio.run(main())
