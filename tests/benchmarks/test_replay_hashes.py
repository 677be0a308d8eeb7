"""The replay-hash benchmark, the yardstick of "no decision changed", runs on the code as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # runs the benchmark as a process, over logs of thousands of events

ROOT = Path(__file__).resolve().parents[2]


def test_the_hashes_of_the_small_logs_are_printed():
    done = subprocess.run(
        [sys.executable, "benchmarks/replay_hashes.py", "--skip-fleet-log"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()[1:]
    assert len(rows) == 4 and all(len(row.split()) >= 6 for row in rows), done.stdout
