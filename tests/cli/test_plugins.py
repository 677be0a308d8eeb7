"""The command line finds the stream jobs through entry points: with stallwatch-streams installed,
`worker`, `fleet` and the fleet app's settings are there; without it (the light install an agent
runtime takes), `stallwatch worker` says in one line what to install and exits 2."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from stallwatch.cli.plugins import command, settings_classes
from stallwatch_streams.fleet.main import main as fleet_main
from stallwatch_streams.fleet.settings import FleetSettings
from stallwatch_streams.worker.service import main as worker_main


def test_the_installed_stream_jobs_give_their_commands_and_settings():
    assert command("worker") is worker_main
    assert command("fleet") is fleet_main
    assert settings_classes() == (FleetSettings,)


@pytest.fixture(scope="module")
def light_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This environment's site-packages without the stallwatch-streams distribution: every entry
    linked but its metadata and its editable finder, as after `pip install stallwatch`."""
    site = tmp_path_factory.mktemp("light-site")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if "stallwatch_streams" not in entry.name:
            (site / entry.name).symlink_to(entry)
    return site


def light(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    """`code` run by this interpreter with `site` as its only site-packages (-S skips the real one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STALLWATCH_", "PYTHON"))}
    prelude = f"import site; site.addsitedir({str(site)!r})\n"
    return subprocess.run(
        [sys.executable, "-S", "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def test_the_light_site_has_stallwatch_and_not_the_stream_jobs(light_site: Path, tmp_path: Path):
    done = light(
        light_site,
        "import importlib.util, stallwatch.cli.main\nprint(importlib.util.find_spec('stallwatch_streams'))",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


@pytest.mark.parametrize("name", ["worker", "fleet", "otlp-kafka"])
def test_without_the_stream_jobs_their_command_names_what_to_install(
    light_site: Path, tmp_path: Path, name: str
):
    done = light(
        light_site,
        "import sys\nfrom stallwatch.cli.main import entry\n"
        f"sys.argv = ['stallwatch', {name!r}]\nsys.exit(entry())",
        tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"stallwatch: `stallwatch {name}` needs the stream jobs: pip install stallwatch-streams"
    ]


def test_without_the_stream_jobs_the_settings_are_the_light_clients(light_site: Path, tmp_path: Path):
    done = light(
        light_site,
        "import sys\nfrom stallwatch.cli.main import entry\n"
        "sys.argv = ['stallwatch', 'settings']\nsys.exit(entry())",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    names = [line.split("=")[0] for line in done.stdout.splitlines()]
    assert "STALLWATCH_BOOTSTRAP" in names and "STALLWATCH_SERVE_TOKEN" in names
    assert not [n for n in names if n.startswith("STALLWATCH_FLEET_")]
