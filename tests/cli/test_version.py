"""A release a user can name: `stallwatch --version` from the package metadata, and a changelog
entry for it that states the formats this tree writes and reads."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from stallwatch.engine.state import READABLE_FORMATS, STATE_FORMAT
from stallwatch_streams.fleet.window import WINDOW_FORMAT

ROOT = Path(__file__).resolve().parents[2]
RELEASE = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_version_prints_the_release_of_both_distributions():
    result = subprocess.run(
        [sys.executable, "-m", "stallwatch.cli.main", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"stallwatch {RELEASE} (stallwatch-streams {RELEASE})"


def test_the_changelog_has_the_release_and_the_formats_it_writes_and_reads():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"\n## {RELEASE}\n" in changelog
    row = re.search(rf"^\| {re.escape(RELEASE)} \|(.*)$", changelog, re.MULTILINE)
    assert row is not None, "the formats table has no row for this release"
    state, position, table = (cell.strip() for cell in row.group(1).split("|")[:3])
    readable = ", ".join(str(f) for f in sorted(READABLE_FORMATS))
    assert state == f"writes {STATE_FORMAT - 1}, {STATE_FORMAT} for observe-only runs; reads {readable}"
    assert position.startswith("writes 1;")
    assert table.startswith(f"writes {WINDOW_FORMAT} ")
