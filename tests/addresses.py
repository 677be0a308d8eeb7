"""Addresses the tests use, with no broker needed: the broker's (from the environment the Makefile
exports) and free ports for the servers tests start."""

from __future__ import annotations

import os
import socket

BOOTSTRAP = os.environ.get("STALLWATCH_BOOTSTRAP", "127.0.0.1:9092")


def free_port() -> int:
    """A port nothing listens on now: tests on one machine (or several suites at once) never
    hand two workers the same web or metrics port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
