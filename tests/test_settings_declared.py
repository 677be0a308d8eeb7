"""Every setting is declared once: the operations tables are generated from the declarations, every
STALLWATCH_* name the manifests and the code use is declared, and secrets show nowhere."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

import pytest

from stallwatch.cli.settings_table import (
    BROKER_SCRIPT_PREFIXES,
    DECLARED,
    declared_names,
    effective,
    table,
    with_tables,
)
from stallwatch.settings import LogSettings, ServeSettings, Settings, SetupError, reveal
from stallwatch_streams.fleet.settings import FleetSettings

ROOT = Path(__file__).resolve().parents[1]
OPERATIONS = ROOT / "docs" / "operations.md"
NAME = re.compile(r"STALLWATCH_[A-Z0-9_]*[A-Z0-9]")
SECRET = "s3cret-value-that-must-not-show"


def test_the_operations_tables_are_generated_from_the_declarations():
    text = OPERATIONS.read_text()
    for cls in DECLARED:
        assert (
            f"<!-- settings table: {cls.__name__} -->\n{table(cls)}<!-- end of settings table -->" in text
        ), f"docs/operations.md has no table of {cls.__name__}: run `make docs`"
    assert with_tables(text) == text, "docs/operations.md drifted from the declarations: run `make docs`"


def test_a_changed_description_is_drift():
    text = OPERATIONS.read_text()
    edited = text.replace("Kafka bootstrap servers, comma-separated", "Kafka servers")
    assert edited != text and with_tables(edited) == text


def test_every_stallwatch_name_in_the_manifests_is_a_declared_setting():
    files = [*sorted((ROOT / "deploy" / "k8s").glob("*.yaml")), ROOT / "docker-compose.yml"]
    used = {name: path.name for path in files for name in NAME.findall(path.read_text())}
    assert len(used) > 10  # the manifests do set them: the pattern finds them
    unknown = {name: where for name, where in used.items() if name not in declared_names()}
    assert not unknown, f"not declared in stallwatch/settings.py: {unknown}"


def test_every_stallwatch_name_the_code_reads_is_a_declared_setting():
    prefixes = {cls.model_config["env_prefix"].rstrip("_") for cls in DECLARED}
    # The local broker's scripts' own, which the unknown-variable warning leaves alone.
    prefixes |= {prefix.rstrip("_") for prefix in BROKER_SCRIPT_PREFIXES}
    sources = [*(ROOT / "stallwatch").rglob("*.py"), *(ROOT / "streams").rglob("*.py")]
    used = {name: str(p.relative_to(ROOT)) for p in sources for name in NAME.findall(p.read_text())}
    unknown = {n: p for n, p in used.items() if n not in declared_names() and n not in prefixes}
    assert not unknown, unknown


def test_names_are_unique_across_the_classes():
    names = [cls.env_name(f) for cls in DECLARED for f in cls.declared()]
    assert len(names) == len(set(names)) == len(declared_names())
    assert "STALLWATCH_FLEET_BASE" not in names  # the fleet app's Kafka settings are the base's


def test_every_setting_has_a_one_line_description():
    for name, (cls, field) in declared_names().items():
        description = cls.model_fields[field].description
        assert description and "\n" not in description, name


def with_every_secret() -> tuple[Settings, ServeSettings]:
    settings = Settings(
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="u",
        sasl_password=SECRET,
        ssl_certfile="/c.pem",
        ssl_key_password=SECRET,
        fingerprint_key=SECRET,
        advisory_key=SECRET,
    )
    return settings, ServeSettings(token=SECRET)


def test_secrets_are_in_no_repr_and_revealed_only_on_request():
    settings, serve = with_every_secret()
    for shown in (
        repr(settings),
        str(settings),
        repr(serve),
        str(serve),
        repr(FleetSettings(base=settings)),
        str(settings.model_dump()),
    ):
        assert SECRET not in shown
    assert reveal(settings.sasl_password) == reveal(serve.token) == SECRET
    assert reveal(None) is None


def test_secrets_are_in_no_log_line(caplog: pytest.LogCaptureFixture):
    settings, serve = with_every_secret()
    with caplog.at_level(logging.INFO):
        logging.getLogger("stallwatch.test").info("settings %s %r %s", settings, settings, serve)
    assert caplog.records and SECRET not in caplog.text


def test_the_generated_table_shows_no_secret_default(monkeypatch: pytest.MonkeyPatch):
    secrets = [(cls, f) for cls in DECLARED for f in cls.declared() if cls.is_secret(f)]
    assert {cls.env_name(f) for cls, f in secrets} == {
        "STALLWATCH_FINGERPRINT_KEY",
        "STALLWATCH_ADVISORY_KEY",
        "STALLWATCH_SASL_PASSWORD",
        "STALLWATCH_SSL_KEY_PASSWORD",
        "STALLWATCH_SERVE_TOKEN",
    }
    for cls, field in secrets:
        (row,) = [r for r in table(cls).splitlines() if r.startswith(f"| `{cls.env_name(field)}` |")]
        assert "| secret text | unset |" in row


def test_the_values_a_process_reads_show_secrets_only_as_set(monkeypatch: pytest.MonkeyPatch):
    for name in declared_names():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STALLWATCH_FINGERPRINT_KEY", SECRET)
    monkeypatch.setenv("STALLWATCH_SERVE_TOKEN", SECRET)
    monkeypatch.setenv("STALLWATCH_PARTITIONS", "12")
    out = io.StringIO()
    effective(out)
    lines = out.getvalue().splitlines()
    assert SECRET not in out.getvalue()
    assert "STALLWATCH_FINGERPRINT_KEY=set (secret)" in lines and "STALLWATCH_PARTITIONS=12" in lines
    assert "STALLWATCH_SASL_PASSWORD=unset" in lines
    assert len(lines) == len(declared_names())


def test_a_wrong_secret_is_named_not_repeated():
    with pytest.raises(SetupError, match="STALLWATCH_FINGERPRINT_KEY is 5 characters") as caught:
        Settings(fingerprint_key="short")
    assert "short" not in str(caught.value).replace("5 characters", "")


def test_built_in_code_settings_ignore_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("STALLWATCH_PARTITIONS", "12")
    monkeypatch.setenv("STALLWATCH_LOG_KAFKA", "raw")
    assert Settings().partitions == 8 and Settings.from_env().partitions == 12
    assert LogSettings().kafka == "folded" and LogSettings.from_env().kafka == "raw"


def test_an_empty_variable_is_unset(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("STALLWATCH_PARTITIONS", "")
    monkeypatch.setenv("STALLWATCH_FLEET_QUIET_S", "")
    assert Settings.from_env().partitions == 8
    assert FleetSettings.from_env(Settings()).quiet_s is None


def test_closed_sets_read_any_case(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("STALLWATCH_LOG_LEVEL", "debug")
    monkeypatch.setenv("STALLWATCH_LOG_FORMAT", "TEXT")
    assert (LogSettings.from_env().level, LogSettings.from_env().format) == ("DEBUG", "text")


def test_several_bad_values_are_still_one_line(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("STALLWATCH_PARTITIONS", "six")
    monkeypatch.setenv("STALLWATCH_WEB_PORT", "-1")
    with pytest.raises(SetupError) as caught:
        Settings.from_env()
    said = str(caught.value)
    assert "\n" not in said and "STALLWATCH_PARTITIONS='six'" in said and "STALLWATCH_WEB_PORT='-1'" in said


def test_the_hook_command_reads_the_declared_serve_settings():
    # `stallwatch hook` reads its two variables without pydantic (it runs on every tool call).
    from stallwatch.hooks import command

    declared = (ServeSettings.env_name("url"), ServeSettings.env_name("token"), ServeSettings().url)
    assert declared == (command.URL_ENV, command.TOKEN_ENV, command.DEFAULT_URL)
