"""The alert rules are valid and behave as their unit tests say (promtool, from Debian)."""

from __future__ import annotations

import subprocess
from pathlib import Path

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["promtool", *args], cwd=RULES, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_are_valid():
    done = promtool("check", "rules", "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 13 rules found" in done.stdout


def test_the_rules_fire_when_and_only_when_they_should():
    done = promtool("test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_prometheus_config_is_valid():
    done = promtool("check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
