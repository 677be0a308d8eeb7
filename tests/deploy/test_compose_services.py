"""docker-compose.yml as written, with no Docker engine here: each of its services built from this
repository runs its command as the image's user (`nobody`, no capability to write where it was
not given the right) in its working directory, on the real broker, and stays up serving."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.kafka_harness import StallwatchProcess, free_port, fresh_settings
from tests.waiting import until

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
# The image's user, and the one capability it is lent here: to reach this machine's Python under
# /root (the image's Python is world-readable), never to write what `nobody` may not.
AS_NOBODY = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--inh-caps=+dac_read_search",
    "--ambient-caps=+dac_read_search",
]


def image_workdir() -> str:
    """The Dockerfile's last WORKDIR: where a service without `working_dir` runs."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    return [line.split()[1] for line in lines if line.startswith("WORKDIR ")][-1]


def directory_like(path: str, base: Path) -> Path:
    """A directory with the owner and mode the image gives `path`: /tmp is world-writable and
    sticky; anything else the image made (/app) is root's, read-only to `nobody`."""
    made = base / path.strip("/").replace("/", "_")
    made.mkdir()
    os.chown(made, 0, 0)
    mode = 0o1777 if path == "/tmp" else 0o755
    made.chmod(mode)
    assert stat.S_IMODE(made.stat().st_mode) == mode
    return made


def answers(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


# Per service: the port that says it serves (its environment's setting), the path to ask, and
# what its log says once it has joined its group (the worker's readiness says so itself).
READY = {
    "worker": ("STALLWATCH_WEB_PORT", "/health/ready", ""),
    "fleet": ("STALLWATCH_FLEET_WEB_PORT", "/health/ready", "Ready"),
}


@pytest.mark.parametrize("name", sorted(READY))
async def test_a_compose_service_runs_as_the_images_user_in_its_working_directory(name: str, tmp_path: Path):
    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][name]
    assert "build" in service  # this repository's image
    tmp_path.chmod(0o755)
    workdir = directory_like(service.get("working_dir", image_workdir()), tmp_path)
    settings = fresh_settings(partitions=int(service["environment"]["STALLWATCH_PARTITIONS"]))
    ready_setting, ready_path, ready_line = READY[name]
    ports = {key: str(free_port()) for key, value in service["environment"].items() if key.endswith("_PORT")}
    env = {
        **{k: str(v) for k, v in service["environment"].items()},
        **ports,
        "STALLWATCH_BOOTSTRAP": settings.bootstrap,
        "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
        "HOME": str(workdir),  # the image's `nobody` has no home of its own
    }
    executable = Path(sys.executable).parent / service["command"][0]
    process = StallwatchProcess(
        settings,
        name,
        f"compose-{name}",
        env,
        argv=[*AS_NOBODY, str(executable), *service["command"][1:]],
        cwd=str(workdir),
    )

    async def serving() -> bool:
        assert process.alive(), f"{name} exited ({process.proc.returncode}):\n{process.log_tail()}"
        answered = await asyncio.to_thread(answers, int(ports[ready_setting]), ready_path)
        return answered and ready_line in process.log_path.read_text(errors="replace")

    try:
        await until(serving, 120, lambda: f"{name} serving:\n{process.log_tail()}", interval_s=0.3)
        assert process.alive()
    finally:
        process.stop()
    assert process.proc.returncode == 0, process.log_tail()
    assert "Traceback" not in process.log_path.read_text(errors="replace"), process.log_tail()
