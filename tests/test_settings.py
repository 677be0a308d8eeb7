"""Settings from the environment: defaults right for a 3-broker cluster, bad values named."""

from __future__ import annotations

import socket
import subprocess
from urllib.request import urlopen

import pytest

from stallwatch.settings import Settings
from stallwatch_streams.metrics import StallwatchMetrics


def test_defaults_bind_the_web_and_metrics_to_loopback_and_replicate_for_three_brokers(monkeypatch):
    for name in (
        "STALLWATCH_WEB_BIND",
        "STALLWATCH_METRICS_BIND",
        "STALLWATCH_REPLICATION_FACTOR",
        "STALLWATCH_MIN_INSYNC_REPLICAS",
    ):
        monkeypatch.delenv(name, raising=False)
    settings = Settings.from_env()
    assert (settings.web_bind, settings.metrics_bind) == ("127.0.0.1", "127.0.0.1")
    assert (settings.replication_factor, settings.min_insync_replicas) == (3, 2)


def test_the_environment_sets_them(monkeypatch):
    monkeypatch.setenv("STALLWATCH_WEB_BIND", "0.0.0.0")
    monkeypatch.setenv("STALLWATCH_METRICS_BIND", "10.0.0.7")
    monkeypatch.setenv("STALLWATCH_REPLICATION_FACTOR", "1")
    monkeypatch.setenv("STALLWATCH_MIN_INSYNC_REPLICAS", "1")
    settings = Settings.from_env()
    assert (settings.web_bind, settings.metrics_bind) == ("0.0.0.0", "10.0.0.7")
    assert (settings.replication_factor, settings.min_insync_replicas) == (1, 1)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("STALLWATCH_PARTITIONS", "eight", "expected an integer"),
        ("STALLWATCH_PARTITIONS", "0", "at least 1"),
        ("STALLWATCH_WEB_PORT", "70000", "between 0 and 65535"),
        ("STALLWATCH_IDLE_TIMEOUT_S", "soon", "expected a number"),
        ("STALLWATCH_REPLICATION_FACTOR", "1.5", "expected an integer"),
        ("STALLWATCH_MIN_INSYNC_REPLICAS", "4", "STALLWATCH_REPLICATION_FACTOR=3"),
    ],
)
def test_a_bad_value_names_its_variable(monkeypatch, name, value, says):
    for other in ("STALLWATCH_REPLICATION_FACTOR", "STALLWATCH_MIN_INSYNC_REPLICAS"):
        monkeypatch.delenv(other, raising=False)  # the Makefile sets them for the local broker
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name) as caught:
        Settings.from_env()
    assert says in str(caught.value)


def test_metrics_listen_on_the_bind_address_only(unused_port):
    StallwatchMetrics().serve(unused_port, "127.0.0.1")
    with urlopen(f"http://127.0.0.1:{unused_port}/metrics", timeout=5) as answer:
        assert b"stallwatch_build_info" in answer.read()
    outside = [
        a
        for a in subprocess.run(
            ["hostname", "-I"], capture_output=True, text=True, check=False
        ).stdout.split()
        if ":" not in a
    ]
    if not outside:
        pytest.skip("this machine has no address besides loopback")
    with pytest.raises(OSError):
        socket.create_connection((outside[0], unused_port), timeout=2).close()


@pytest.fixture
def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
