"""What an agent runtime installs stays light: the client imports neither Faust nor the
worker's metrics, and claims no generic top-level module name."""

from __future__ import annotations

import subprocess
import sys


def test_the_client_imports_no_faust_and_no_prometheus_client():
    code = ("import sys, stallwatch.client, stallwatch.replay, stallwatch.engine.fleet; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('faust', 'mode', 'prometheus_client', 'streams', 'schemas')); print(bad)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_the_worker_is_installed_under_the_stallwatch_package():
    import stallwatch.streams.app as app

    assert app.__name__ == "stallwatch.streams.app"
