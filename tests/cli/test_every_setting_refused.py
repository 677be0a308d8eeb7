"""Every declared setting with a bad value of its type: one line naming the variable, exit 2, before
the command connects to anything. The worker reads every setting but the fleet app's; the fleet
app's are met by `stallwatch fleet`."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from stallwatch.cli.main import entry
from stallwatch.cli.settings_table import declared_names
from stallwatch.settings import choices, types_in
from stallwatch_streams.fleet.settings import FleetSettings
from tests.addresses import free_port

# Text settings refused by a rule of their own, with a value that breaks it.
TEXT_REFUSED = {
    "STALLWATCH_POLICY_FILE": "/nowhere/policy.toml",
    "STALLWATCH_SSL_CAFILE": "/ca.pem",
    "STALLWATCH_SSL_CERTFILE": "/cert.pem",
    "STALLWATCH_SSL_KEYFILE": "/key.pem",
    "STALLWATCH_SSL_KEY_PASSWORD": "a passphrase",
    "STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER": "module:callable",
    "STALLWATCH_FINGERPRINT_KEY": "too-short",
    "STALLWATCH_ADVISORY_KEY": "too-short",
    "STALLWATCH_TENANT": "acme.eu",
    "STALLWATCH_OBSERVE_ONLY_TENANTS": "acme,acme.eu",
    "STALLWATCH_FLEET_READER_TOKENS_DIR": "/nowhere/readers",
}
# Free text: any value is one a deployment may choose (an address, a name, a user, a token).
ANY_TEXT = {
    "STALLWATCH_BOOTSTRAP",
    "STALLWATCH_TOPIC_PREFIX",
    "STALLWATCH_OTLP_TOPIC",
    "STALLWATCH_WEB_BIND",
    "STALLWATCH_METRICS_BIND",
    "STALLWATCH_INSTANCE_ID",
    "STALLWATCH_SASL_USERNAME",
    "STALLWATCH_SASL_PASSWORD",
    "STALLWATCH_SERVE_TOKEN",
    "STALLWATCH_SERVE_URL",
}


def bad_values(name: str) -> list[str]:
    """Values of the wrong kind for a setting's type, and past its bounds."""
    if name in TEXT_REFUSED:
        return [TEXT_REFUSED[name]]
    cls, field = declared_names()[name]
    info = cls.model_fields[field]
    kinds = {getattr(t, "__name__", "") for t in types_in(info.annotation)}
    low = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
    high = next((m.le for m in info.metadata if hasattr(m, "le")), None)
    past = [str(low - 1) for _ in [0] if low is not None] + [str(high + 1) for _ in [0] if high is not None]
    if choices(info):
        return ["bogus"]
    if "bool" in kinds:
        return ["maybe"]
    if "int" in kinds:
        return ["eight", "1.5", *past]
    if "float" in kinds:
        return ["soon", "nan", "inf", *past]
    return []


CASES = [(name, value) for name in sorted(declared_names()) for value in bad_values(name)]


def test_every_declared_setting_has_a_bad_value_or_is_free_text():
    untested = {name for name in declared_names() if not bad_values(name)}
    assert untested == ANY_TEXT


def run(
    command: list[str],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str]:
    """The console script's entry point, as `stallwatch COMMAND` runs it, with only `env` set."""
    for name in declared_names():
        monkeypatch.delenv(name, raising=False)
    # Nothing answers there: a value let through would end in "no Kafka broker answers" instead.
    monkeypatch.setenv("STALLWATCH_BOOTSTRAP", f"127.0.0.1:{free_port()}")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["stallwatch", *command])
    code = entry()
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("name", "value"), CASES, ids=[f"{n}={v}" for n, v in CASES])
def test_a_bad_value_is_one_line_naming_it_and_exit_2(
    name: str, value: str, monkeypatch: Any, capsys: pytest.CaptureFixture[str]
):
    cls, field = declared_names()[name]
    command = ["fleet"] if cls is FleetSettings else ["worker"]
    code, said = run(command, {name: value}, monkeypatch, capsys)
    assert code == 2, said
    assert len(said.strip().splitlines()) == 1, said
    assert said.startswith("stallwatch: ") and name in said, said
    assert "Traceback" not in said and "broker" not in said, said
    if cls.is_secret(field):
        assert value not in said  # a secret is named, never repeated


COMMANDS = [
    ["worker"],
    ["fleet"],
    ["replay", "-"],
    ["explain", "r1", "-"],
    ["top", "--once"],
    ["serve"],
    ["mcp-proxy", "--", "true"],
    ["demo"],
    ["schemas"],
    ["settings"],
    ["hooks", "install", "claude"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize(
    "env",
    [{"STALLWATCH_LOG_LEVEL": "bogus"}, {"STALLWATCH_PARTITIONS": "six"}],
    ids=lambda env: next(iter(env)),
)
def test_every_command_refuses_a_bad_value_in_one_line(
    command: list[str], env: dict[str, str], monkeypatch: Any, capsys: pytest.CaptureFixture[str]
):
    code, said = run(command, env, monkeypatch, capsys)
    assert code == 2, said
    assert len(said.strip().splitlines()) == 1 and next(iter(env)) in said, said
