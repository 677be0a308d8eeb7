"""The Strimzi KafkaUser manifests grant exactly what deploy/kafka/acls.sh grants, quotas included."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
USERS = ROOT / "deploy/k8s/acls"
# Strimzi's names for what Kafka's AclCommand calls a transactional id and a prefixed pattern.
RESOURCE = {"topic": "topic", "group": "group", "transactionalId": "transactional-id"}
PATTERN = {"literal": "literal", "prefix": "prefixed"}
# Strimzi's names for Kafka's user quotas.
QUOTA = {
    "producerByteRate": "producer_byte_rate",
    "consumerByteRate": "consumer_byte_rate",
    "requestPercentage": "request_percentage",
}


def granted(manifest: str) -> set[tuple[str, ...]]:
    user = yaml.safe_load((USERS / manifest).read_text())
    principal = f"User:{user['metadata']['name']}"
    quotas = {
        (principal, "quota", QUOTA[name], str(value))
        for name, value in user["spec"].get("quotas", {}).items()
    }
    return quotas | {
        (
            principal,
            RESOURCE[acl["resource"]["type"]],
            acl["resource"]["name"],
            PATTERN[acl["resource"]["patternType"]],
            operation,
        )
        for acl in user["spec"]["authorization"]["acls"]
        for operation in acl["operations"]
    }


def printed(*args: str) -> set[tuple[str, ...]]:
    env = {**os.environ, "STALLWATCH_TOPIC_PREFIX": "stallwatch"}
    out = subprocess.run(
        [str(ROOT / "deploy/kafka/acls.sh"), "--print", *args],
        check=True,
        text=True,
        capture_output=True,
        env=env,
    ).stdout
    return {tuple(line.split()) for line in out.splitlines() if line}


SCRIPTED = {
    "worker.yaml": ["worker", "User:stallwatch-worker"],
    "operator.yaml": ["operator", "User:stallwatch-operator"],
    "team.yaml": ["team", "User:team"],
    "tenant-acme.yaml": ["tenant", "acme", "User:acme"],
}


@pytest.mark.parametrize(("manifest", "args"), SCRIPTED.items())
def test_each_user_has_the_grants_of_the_script(manifest, args):
    assert granted(manifest) == printed(*args)


def test_every_manifest_is_held_to_the_script():
    assert {path.name for path in USERS.glob("*.yaml")} == {*SCRIPTED, "fleet.yaml"}


def test_the_fleet_user_has_its_own_grants_and_the_tenants_events():
    fleet = "User:stallwatch-fleet"
    tenant = {g for g in printed("tenant", "acme", "User:acme", fleet) if g[0] == fleet}
    assert tenant and granted("fleet.yaml") == printed("fleet", fleet) | tenant


def test_a_tenant_has_quotas_and_the_shared_principals_none():
    assert {g[2] for g in granted("tenant-acme.yaml") if g[1] == "quota"} == set(QUOTA.values())
    for manifest in ("worker.yaml", "operator.yaml", "team.yaml", "fleet.yaml"):
        assert not [g for g in granted(manifest) if g[1] == "quota"]
