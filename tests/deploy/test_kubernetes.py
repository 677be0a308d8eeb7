"""The Kubernetes manifests: valid against the API schemas (kubernetes-validate, offline) and
consistent with what the worker reads and serves."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from stallwatch.cli.settings_table import declared_names

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30"


def resources() -> list[dict]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs = []
    for name in kustomization["resources"]:
        docs.extend(d for d in yaml.safe_load_all((K8S / name).read_text()) if d)
    return docs


def of_kind(kind: str, name: str | None = None) -> dict:
    (found,) = [d for d in resources() if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return found


@pytest.mark.parametrize("doc", resources(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_each_resource_is_valid_for_the_kubernetes_api(doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_worker_runs_with_its_settings_and_probes_on_its_web_port():
    config = of_kind("ConfigMap")["data"]
    known = set(declared_names())
    assert set(config) <= known, set(config) - known
    pod = of_kind("Deployment", "stallwatch-worker")["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["stallwatch", "worker"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {
        "web": int(config["STALLWATCH_WEB_PORT"]),
        "metrics": int(config["STALLWATCH_METRICS_PORT"]),
    }
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "web"
    # Liveness is the consume loop's progress, not an open port; readiness the restored states.
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    env = {e["name"]: e for e in container["env"]}
    assert env["STALLWATCH_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == config["STALLWATCH_METRICS_PORT"]


def test_there_are_no_more_replicas_than_partitions():
    replicas = of_kind("Deployment", "stallwatch-worker")["spec"]["replicas"]
    assert 2 <= replicas <= int(of_kind("ConfigMap")["data"]["STALLWATCH_PARTITIONS"])


def test_the_validator_rejects_a_broken_manifest():
    broken = of_kind("Deployment", "stallwatch-worker")
    broken["spec"]["replicas"] = "two"
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGets"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_fleet_app_runs_beside_the_workers_with_its_own_selector_and_web_port():
    config = of_kind("ConfigMap")["data"]
    worker = of_kind("Deployment", "stallwatch-worker")["spec"]
    fleet = of_kind("Deployment", "stallwatch-fleet")["spec"]
    # Selectors apart: neither Deployment may adopt the other's pods.
    assert worker["selector"] != fleet["selector"]
    (container,) = fleet["template"]["spec"]["containers"]
    assert container["command"] == ["stallwatch", "fleet"]
    assert container["ports"] == [{"name": "web", "containerPort": int(config["STALLWATCH_FLEET_WEB_PORT"])}]
    # Faust writes its data directory under the working directory, on a read-only root.
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert container["workingDir"] in mounts
