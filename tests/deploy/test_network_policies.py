"""The manifests' NetworkPolicies, evaluated as Kubernetes evaluates them (the subset they use):
only the monitoring namespace or a labelled scraper reaches the metrics and health ports, and
the stream jobs reach only Kafka and DNS."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.deploy.test_kubernetes import K8S, of_kind, resources

NAMESPACE = yaml.safe_load((K8S / "kustomization.yaml").read_text())["namespace"]
# The label kustomize's `labels` puts on every pod.
COMMON = {"app.kubernetes.io/name": "stallwatch"}
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}
OTHER = {"kubernetes.io/metadata.name": "default"}
OWN = {"kubernetes.io/metadata.name": NAMESPACE}
SCRAPER = {"stallwatch.io/scraper": "true"}


def matches(selector: dict | None, labels: dict[str, str]) -> bool:
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(expression_holds(rule, labels) for rule in selector.get("matchExpressions") or [])


def expression_holds(rule: dict, labels: dict[str, str]) -> bool:
    key, op, values = rule["key"], rule["operator"], rule.get("values") or []
    return {
        "In": labels.get(key) in values,
        "NotIn": labels.get(key) not in values,
        "Exists": key in labels,
        "DoesNotExist": key not in labels,
    }[op]


def pod_of(deployment: str) -> tuple[dict[str, str], dict[str, int]]:
    """A Deployment's pod: its labels and its container ports by name."""
    template = of_kind("Deployment", deployment)["spec"]["template"]
    ports = {
        p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])
    }
    return {**COMMON, **template["metadata"]["labels"]}, ports


def policies(labels: dict[str, str], kind: str) -> list[dict]:
    return [
        p["spec"]
        for p in resources()
        if p["kind"] == "NetworkPolicy"
        and kind in p["spec"].get("policyTypes", ["Ingress"])
        and matches(p["spec"]["podSelector"], labels)
    ]


def port_matches(rule_ports: list[dict] | None, port: int, protocol: str, named: dict[str, int]) -> bool:
    if not rule_ports:
        return True
    return any(
        named.get(p["port"], p["port"]) == port and p.get("protocol", "TCP") == protocol for p in rule_ports
    )


def peer_matches(peer: dict, namespace: dict[str, str], labels: dict[str, str]) -> bool:
    if "ipBlock" in peer:
        return False  # no policy here allows by address
    if "namespaceSelector" in peer:
        in_namespace = matches(peer["namespaceSelector"], namespace)
    else:
        in_namespace = namespace == OWN
    return in_namespace and ("podSelector" not in peer or matches(peer["podSelector"], labels))


def ingress_allowed(
    deployment: str, port: int, namespace: dict[str, str], labels: dict[str, str] | None = None
) -> bool:
    pod, named = pod_of(deployment)
    selecting = policies(pod, "Ingress")
    if not selecting:
        return True  # a pod no policy selects is not isolated
    return any(
        port_matches(rule.get("ports"), port, "TCP", named)
        and (
            not rule.get("from") or any(peer_matches(peer, namespace, labels or {}) for peer in rule["from"])
        )
        for spec in selecting
        for rule in spec.get("ingress") or []
    )


def egress_allowed(deployment: str, port: int, protocol: str = "TCP") -> bool:
    """To an address outside the cluster's pods (where brokers and DNS servers may be)."""
    pod, named = pod_of(deployment)
    selecting = policies(pod, "Egress")
    if not selecting:
        return True
    return any(
        port_matches(rule.get("ports"), port, protocol, named) and not rule.get("to")
        for spec in selecting
        for rule in spec.get("egress") or []
    )


JOBS = ["stallwatch-worker", "stallwatch-fleet"]


def served_ports(deployment: str) -> list[int]:
    return sorted(pod_of(deployment)[1].values())


@pytest.mark.parametrize("deployment", JOBS)
def test_every_pod_of_the_namespace_is_isolated_both_ways(deployment):
    deny = [p for p in resources() if p["kind"] == "NetworkPolicy" and p["spec"]["podSelector"] == {}]
    assert deny and set(deny[0]["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert not deny[0]["spec"].get("ingress") and not deny[0]["spec"].get("egress")
    assert policies(pod_of(deployment)[0], "Ingress") and policies(pod_of(deployment)[0], "Egress")


@pytest.mark.parametrize("deployment", JOBS)
def test_metrics_and_health_are_reachable_from_monitoring_or_a_labelled_scraper(deployment):
    ports = served_ports(deployment)
    assert ports  # the worker: 9400 metrics and 9401 health; the fleet app: 6067
    for port in ports:
        assert ingress_allowed(deployment, port, MONITORING)
        assert ingress_allowed(deployment, port, OTHER, SCRAPER)
        assert ingress_allowed(deployment, port, OWN, SCRAPER)
        assert not ingress_allowed(deployment, port, OTHER)
        assert not ingress_allowed(deployment, port, OWN, {"app": "something-else"})
        # Another stallwatch pod is no scraper.
        assert not ingress_allowed(deployment, port, OWN, pod_of("stallwatch-worker")[0])
    for port in (80, 8080, 9092, max(ports) + 1):
        assert not ingress_allowed(deployment, port, MONITORING)


@pytest.mark.parametrize("deployment", JOBS)
def test_the_stream_jobs_reach_only_kafka_and_dns(deployment):
    bootstrap = of_kind("ConfigMap")["data"]["STALLWATCH_BOOTSTRAP"]
    kafka_ports = {int(server.rsplit(":", 1)[1]) for server in bootstrap.split(",")}
    for port in kafka_ports:
        assert egress_allowed(deployment, port)
    assert egress_allowed(deployment, 53, "UDP") and egress_allowed(deployment, 53, "TCP")
    for port in (80, 443, 9400, 9401, 6067):
        assert not egress_allowed(deployment, port)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
def test_kustomize_leaves_the_policies_selectors_as_written():
    """kustomize's `labels` would add the common label to a matchLabels selector of a peer,
    and so demand it of the scraper: the policies use matchExpressions it leaves alone."""
    built = [
        d
        for d in yaml.safe_load_all(
            subprocess.run(
                ["kubectl", "kustomize", str(K8S)], capture_output=True, check=True, timeout=60
            ).stdout
        )
        if d
    ]
    written = {p["metadata"]["name"]: p["spec"] for p in resources() if p["kind"] == "NetworkPolicy"}
    assert {p["metadata"]["name"]: p["spec"] for p in built if p["kind"] == "NetworkPolicy"} == written
    assert all(p["metadata"]["namespace"] == NAMESPACE for p in built if p["kind"] == "NetworkPolicy")
