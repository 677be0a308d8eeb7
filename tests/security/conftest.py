"""The project's broker with SASL and authorization on (deploy/kafka/kafka.sh with
STALLWATCH_KAFKA_SECURE=1), on ports of its own beside the plain one, and the ACLs as shipped
(deploy/kafka/acls.sh)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stallwatch.settings import Settings
from tests.security.oauth_token import provider_spec

ROOT = Path(__file__).resolve().parents[2]
# The plain broker's port and up to port+5 are taken (kafka.sh); this one and port+1 are free.
PORT = int(os.environ.get("STALLWATCH_KAFKA_PORT", "9092")) + 20
# The broker's jars, Kafka's own tools among them (kafka.sh resolves them).
KAFKA_LIBS = Path(os.environ.get("STALLWATCH_KAFKA_CACHE", ROOT / ".cache/kafka")) / "libs"


@dataclass(frozen=True)
class SecureBroker:
    port: int
    passwords: dict[str, str]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def controller(self) -> str:
        """The controller listener (kafka.sh: the port after the broker's)."""
        return f"127.0.0.1:{self.port + 1}"

    @property
    def data(self) -> Path:
        return ROOT / f".cache/kafka-data/{self.port}"

    def settings(self, principal: str, prefix: str, mechanism: str = "PLAIN", **more: object) -> Settings:
        """A principal's settings on topics of `prefix`."""
        auth: dict[str, object] = {"sasl_mechanism": mechanism}
        if mechanism == "OAUTHBEARER":
            auth["sasl_oauth_token_provider"] = provider_spec(principal)
        else:
            auth.update(sasl_username=principal, sasl_password=self.passwords[principal])
        return Settings(
            bootstrap=self.bootstrap,
            topic_prefix=prefix,
            partitions=2,
            replication_factor=1,
            min_insync_replicas=1,
            security_protocol="SASL_PLAINTEXT",
            **auth,
            **more,
        )  # type: ignore[arg-type]

    def env(self, principal: str, mechanism: str = "PLAIN") -> dict[str, str]:
        """The same, as a `stallwatch` process reads it."""
        env = {"STALLWATCH_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "STALLWATCH_SASL_MECHANISM": mechanism}
        if mechanism == "OAUTHBEARER":
            env.update(STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER=provider_spec(principal))
        else:
            env.update(STALLWATCH_SASL_USERNAME=principal, STALLWATCH_SASL_PASSWORD=self.passwords[principal])
        return env

    def acls(self, prefix: str, *args: str) -> None:
        """deploy/kafka/acls.sh ARGS on `prefix`'s topics, as the administrator."""
        subprocess.run(
            [str(ROOT / "deploy/kafka/acls.sh"), *args],
            check=True,
            timeout=120,
            env={
                **os.environ,
                "STALLWATCH_KAFKA_PORT": str(self.port),
                "STALLWATCH_BOOTSTRAP": self.bootstrap,
                "STALLWATCH_TOPIC_PREFIX": prefix,
            },
        )


def kafka_sh(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "deploy/kafka/kafka.sh"), command],
        text=True,
        timeout=600,
        capture_output=True,
        check=False,
        env={**os.environ, "STALLWATCH_KAFKA_SECURE": "1", "STALLWATCH_KAFKA_PORT": str(PORT)},
    )


@contextlib.contextmanager
def running_secure_broker() -> Iterator[SecureBroker]:
    """The secure broker, started if it is not up (and then stopped at the end)."""
    started = kafka_sh("status").returncode != 0
    if started:
        up = kafka_sh("up")
        assert up.returncode == 0, up.stderr
    lines = (ROOT / f".cache/kafka-data/{PORT}/passwords").read_text().splitlines()
    try:
        yield SecureBroker(PORT, dict(line.split("=", 1) for line in lines))
    finally:
        if started:
            kafka_sh("down")


@pytest.fixture(scope="session")
def secure_broker() -> Iterator[SecureBroker]:
    with running_secure_broker() as broker:
        yield broker


def new_prefix() -> str:
    """A topic prefix no other test uses: topics, groups and ACLs of its own on the one broker."""
    return f"s{uuid.uuid4().hex[:10]}"


@pytest.fixture
def prefix() -> str:
    return new_prefix()
