"""Publishing ahead, the pure commit logic with fakes: a batch's commands reach the commands topic
before its transaction begins, and only then does the transaction (everything else) commit; a
failed send or transaction rebuilds the partition and the batch read again publishes the same
bytes; records stamped with the producers' CreateTime are never published ahead."""

from __future__ import annotations

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

from streams.worker.batch import SourceMessage
from tests.streams.worker.fake_kafka import FakeAheadProducer, FakeProducer
from tests.streams.worker.test_commit import SOURCE, Partition0, looping_run


def ahead_partition(fail: BaseException | None = None) -> tuple[Partition0, FakeAheadProducer]:
    p = Partition0()
    ahead = FakeAheadProducer(fail, transactional=p.committed)
    p.committer.ahead = ahead
    return p, ahead


async def test_commands_are_published_ahead_and_the_transaction_holds_the_rest():
    reference = Partition0()  # commands in the transaction, as before
    assert await reference.committer.commit(SOURCE, looping_run()) is not None
    p, ahead = ahead_partition()
    result = await p.committer.commit(SOURCE, looping_run())
    assert result is not None and result.published_at is not None
    assert ahead.records("commands") == reference.committed.records("commands")
    assert p.committed.records("commands") == []
    assert p.committed.records("changelog") == reference.committed.records("changelog")
    assert all(partition == SOURCE.partition for _, partition, _, _ in ahead.sent)


async def test_a_failed_ahead_send_is_a_failed_batch_read_again_with_the_same_bytes():
    p, _ = ahead_partition(KafkaTimeoutError())
    assert await p.committer.commit(SOURCE, looping_run()) is None
    assert p.rebuilds == 1 and p.committed.visible == []  # no transaction after a failed send
    retry = FakeAheadProducer(transactional=p.committed)
    p.committer.ahead = retry
    assert await p.committer.commit(SOURCE, looping_run()) is not None
    reference, ahead = ahead_partition()
    await reference.committer.commit(SOURCE, looping_run())
    assert retry.sent == ahead.sent


async def test_a_failed_transaction_after_publishing_publishes_the_same_bytes_again():
    messages = looping_run()
    p, ahead = ahead_partition()
    await p.committer.commit(SOURCE, messages[:5])
    first = list(ahead.sent)
    p.producers[0] = FakeProducer(fail_commit=KafkaConnectionError("the broker went away"))
    assert await p.committer.commit(SOURCE, messages[5:]) is None
    published = ahead.sent[len(first):]
    assert published and p.rebuilds == 1
    assert await p.committer.commit(SOURCE, messages[5:]) is not None
    # The batch read again after the rebuild: the same commands, byte for byte, again.
    assert ahead.sent[len(first) + len(published):] == published


async def test_records_stamped_by_their_producer_are_never_published_ahead():
    create_time = [SourceMessage(m.key, m.value, m.partition, m.offset, m.timestamp, 0)
                   for m in looping_run()]
    p, ahead = ahead_partition()
    assert await p.committer.commit(SOURCE, create_time) is not None
    assert ahead.sent == [] and len(p.committed.records("commands")) == 6
