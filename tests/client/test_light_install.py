"""What an agent runtime installs stays light: the client imports neither the stream jobs nor
their metrics, and claims no generic top-level module name."""

from __future__ import annotations

import subprocess
import sys


def test_the_client_imports_neither_the_stream_jobs_nor_prometheus_client():
    code = (
        "import sys, stallwatch.client, stallwatch.cli.replay, stallwatch.engine.embedded; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('faust', 'aiohttp', 'prometheus_client', 'stallwatch_streams', 'streams', 'schemas')); "
        "print(bad)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
