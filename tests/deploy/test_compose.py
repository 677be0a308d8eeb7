"""docker-compose.yml cannot run here (no Docker engine), so it is checked as a file."""

from __future__ import annotations

from pathlib import Path

import yaml

from stallwatch.cli.settings_table import declared_names
from stallwatch_streams.fleet.settings import FleetSettings

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_stack_has_the_official_kafka_image_workers_prometheus_and_grafana():
    services = compose()["services"]
    assert set(services) == {"kafka", "worker", "fleet", "prometheus", "grafana"}
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert services["worker"]["command"] == ["stallwatch", "worker"]
    assert services["worker"]["deploy"]["replicas"] >= 2


def test_worker_settings_are_ones_the_worker_reads():
    known = {name for name, (cls, _) in declared_names().items() if cls is not FleetSettings}
    env = compose()["services"]["worker"]["environment"]
    assert set(env) <= known, set(env) - known
    assert env["STALLWATCH_BOOTSTRAP"].split(":")[0] == "kafka"


def test_fleet_settings_are_ones_the_fleet_app_reads_and_prometheus_scrapes_its_port():
    known = set(declared_names())
    fleet = compose()["services"]["fleet"]
    assert fleet["command"] == ["stallwatch", "fleet"]
    assert set(fleet["environment"]) <= known, set(fleet["environment"]) - known
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    job = next(j for j in scrape["scrape_configs"] if j["job_name"] == "stallwatch-fleet")
    assert job["dns_sd_configs"][0]["port"] == int(fleet["environment"]["STALLWATCH_FLEET_WEB_PORT"])


def test_mounted_files_and_the_build_context_exist():
    services = compose()["services"]
    for service in services.values():
        for volume in service.get("volumes", []):
            assert (ROOT / volume.split(":")[0]).exists(), volume
    assert (ROOT / "Dockerfile").exists()
    port = compose()["services"]["worker"]["environment"]["STALLWATCH_METRICS_PORT"]
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    assert scrape["scrape_configs"][0]["dns_sd_configs"][0]["port"] == int(port)


def test_every_published_port_is_bound_to_the_hosts_loopback():
    published = {name: service.get("ports", []) for name, service in compose()["services"].items()}
    assert any(published.values())
    for name, ports in published.items():
        for port in ports:
            # Short syntax "HOST_IP:HOST_PORT:CONTAINER_PORT", or the long one with host_ip.
            host_ip = (
                port.get("host_ip")
                if isinstance(port, dict)
                else (str(port).split(":")[0] if str(port).count(":") == 2 else None)
            )
            assert host_ip == "127.0.0.1", (name, port)


def test_the_image_copies_and_installs_both_distributions():
    """The worker's code is its own distribution in `streams/`: an image without it, or one that
    installs only the light client, has a `stallwatch worker` that cannot start."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = setuptools["packages"]["find"]["include"]
    text = (ROOT / "Dockerfile").read_text()
    copied = {line.split()[1] for line in text.splitlines() if line.startswith("COPY ")}
    assert {p.rstrip("*") for p in packages} | {"streams"} <= copied
    worker_stage = text.split(" AS worker")[1].splitlines()
    (install,) = [line.split() for line in worker_stage if line.startswith("RUN pip install")]
    assert "." in install and "./streams" in install
    stages = [
        line.split()[-1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("FROM ")
    ]
    assert stages[-1] == "worker" and "serve" in stages  # compose builds the last: the worker
