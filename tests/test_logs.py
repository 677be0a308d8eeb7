"""aiokafka's retried complaints folded into episodes; anything else passes through; counts kept."""

from __future__ import annotations

import logging

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaError

from stallwatch import logs

UNREACHABLE = ('Unable connect to "%s:%s": %s', ("127.0.0.1", 9, "refused"))
NOT_FOUND = ("Topic %s not found in cluster metadata", ("stallwatch.events",))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(msg: str, args: tuple, level: int = logging.ERROR, name: str = "aiokafka.client"):
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


@pytest.fixture
def trouble(caplog: pytest.LogCaptureFixture) -> tuple[logs.KafkaTrouble, Clock]:
    caplog.set_level(logging.INFO, logger="stallwatch.kafka.trouble")
    clock = Clock()
    return logs.KafkaTrouble(summary_s=10, clock=clock), clock


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "stallwatch.kafka.trouble"]


def test_an_outage_is_one_line_a_summary_and_one_line_when_over(trouble, caplog):
    folder, clock = trouble
    for _ in range(60):  # 30 s of an absent broker, 2 lines a second... per connection, in truth
        assert folder.filter(record(*UNREACHABLE)) is False
        folder.tick()
        clock.now += 0.25
        assert folder.filter(record(*UNREACHABLE)) is False
        folder.tick()
        clock.now += 0.25
    clock.now += logs.QUIET_S
    assert folder.tick() is False
    lines = said(caplog)
    assert [level for level, _ in lines] == [logging.WARNING] * 4  # noticed, 2 summaries, over
    assert "Unable connect" in lines[0][1] and "trouble for 3 s" in lines[0][1]
    assert all("folded (" in text for _, text in lines[1:])
    assert "Kafka answers again" in lines[-1][1]
    assert "120 aiokafka lines folded (120 broker unreachable)" in lines[-1][1]
    assert folder.total_folded == 120


def test_start_up_noise_leaves_one_info_line_with_its_count(trouble, caplog):
    folder, clock = trouble
    for _ in range(8):
        folder.filter(record(*NOT_FOUND))
        clock.now += 0.5
        folder.tick()
    clock.now += logs.QUIET_S
    folder.tick()
    assert said(caplog) == [
        (
            logging.INFO,
            "Kafka settled after 3.5 s (start-up, rebalance or a short "
            "blip); 8 aiokafka lines folded (8 not ready (topics, group coordinator, "
            "leaders))",
        )
    ]


def test_one_stray_line_of_each_kind_is_no_outage_whatever_time_passes(trouble, caplog):
    # `make run` printed "Kafka trouble for 3 s" for one refused connect and one coordinator
    # not yet available, at a group's start, then "Kafka answers again after 0 s of trouble".
    folder, clock = trouble
    folder.filter(record("Group Coordinator Request failed: %s", ("[Error 15]",)))
    folder.filter(record(*UNREACHABLE))
    for _ in range(20):
        clock.now += 0.5
        folder.tick()
    assert said(caplog) == [
        (
            logging.INFO,
            "Kafka settled after 0.0 s (start-up, rebalance or a short "
            "blip); 2 aiokafka lines folded (1 not ready (topics, group coordinator, "
            "leaders), 1 broker unreachable)",
        )
    ]


def test_topics_missing_for_long_are_announced_with_aiokafkas_words(trouble, caplog):
    folder, clock = trouble
    while clock.now < 100 + logs.NOT_READY_GRACE_S + 1:
        folder.filter(record(*NOT_FOUND))
        folder.tick()
        clock.now += 1
    ((level, text),) = said(caplog)
    assert level == logging.WARNING and "Topic stallwatch.events not found in cluster metadata" in text


def test_other_aiokafka_lines_pass_through_untouched(trouble, caplog):
    folder, _ = trouble
    assert folder.filter(record("Unexpected error in sender routine", ())) is True
    assert folder.filter(record("Topic %s is not authorized for this client", ("x",))) is True
    assert folder.episode is None and folder.total_folded == 0


def _raised(exc: BaseException, cause: BaseException) -> BaseException:
    try:
        raise exc from cause
    except BaseException as raised:  # a real raise, for its cause chain
        return raised


def test_the_senders_catch_all_is_folded_only_for_a_lost_connection(trouble):
    folder, _ = trouble
    lost = _raised(
        KafkaError("Unexpected error during batch delivery"),
        _raised(KafkaError("KafkaConnectionError(...)"), KafkaConnectionError("closed")),
    )
    other = _raised(KafkaError("Unexpected error during batch delivery"), ValueError("a bug"))
    for exc, folded in ((lost, True), (other, False)):
        line = record("Unexpected error in sender routine", (), name="aiokafka.producer.sender")
        line.exc_info = (type(exc), exc, exc.__traceback__)
        assert folder.filter(line) is not folded
    assert folder.total_folded == 1


def test_the_filter_sits_on_every_aiokafka_logger():
    folder = logs.tame_kafka_loggers()
    for name in (
        "aiokafka",
        "aiokafka.cluster",
        "aiokafka.consumer.group_coordinator",
        "aiokafka.consumer.fetcher",
        "aiokafka.producer.sender",
    ):
        assert folder in logging.getLogger(name).filters
    assert logs.tame_kafka_loggers() is folder
