"""The local three-node cluster (deploy/kafka/cluster.sh) for every test here: started once,
and stopped after the last test only if these tests started it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import cluster_harness as nodes


@pytest.fixture(scope="package")
def cluster() -> Iterator[None]:
    started = nodes.up()
    yield
    if started:
        nodes.down()
