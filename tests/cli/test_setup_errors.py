"""What a first-time user meets: every set-up error names the setting to change, without a traceback."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from stallwatch.client import KafkaClient
from stallwatch.settings import Settings
from tests.addresses import BOOTSTRAP, free_port


def stallwatch(
    args: list[str],
    env: dict[str, str],
    prelude: str = "",
    cwd: Path | None = None,
    wrap: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """The console script, as a user runs it (with `prelude` run first, to hide a module; in
    `cwd`; behind `wrap`, a command that runs it)."""
    code = (
        f"{prelude}\nimport sys\nfrom stallwatch.cli.main import entry\n"
        f"sys.argv = ['stallwatch', *{args!r}]\nsys.exit(entry())"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("STALLWATCH_")}
    return subprocess.run(
        [*(wrap or []), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={
            **base,
            "STALLWATCH_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}",
            "STALLWATCH_WEB_PORT": str(free_port()),
            "STALLWATCH_METRICS_PORT": str(free_port()),
            "STALLWATCH_FLEET_WEB_PORT": str(free_port()),
            "PYTHONPATH": str(ROOT),
            **env,
        },
    )


ROOT = Path(__file__).resolve().parents[2]
NO_BROKER = {"STALLWATCH_BOOTSTRAP": f"127.0.0.1:{free_port()}"}
ON_THE_BROKER = {
    "STALLWATCH_BOOTSTRAP": BOOTSTRAP,
    "STALLWATCH_REPLICATION_FACTOR": "1",
    "STALLWATCH_MIN_INSYNC_REPLICAS": "1",
}
# Root without its capabilities: a folder it may not write is one it cannot write.
WITHOUT_CAPABILITIES = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"]


def one_line(result: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2, one line on stderr naming what to change, nothing on stdout, no traceback."""
    said_only(result, *words)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stdout == "", result.stdout


# Every error a user can cause with no broker, no topics, a missing file, a folder, a bad setting:
# (command, environment, words the line says). The commands that need a broker run in the kafka lane.
ERRORS = [
    (["top", "--once"], NO_BROKER, ("no Kafka broker answers", "STALLWATCH_BOOTSTRAP")),
    (["explain", "r1"], NO_BROKER, ("no Kafka broker answers", "STALLWATCH_BOOTSTRAP")),
    (["worker"], NO_BROKER, ("no Kafka broker answers", "STALLWATCH_BOOTSTRAP")),
    (["fleet"], NO_BROKER, ("no Kafka broker answers", "STALLWATCH_BOOTSTRAP")),
    (["tenants", "add", "acme"], NO_BROKER, ("no Kafka broker answers", "STALLWATCH_BOOTSTRAP")),
    (["replay", "/nonexistent/events.jsonl"], {}, ("/nonexistent/events.jsonl", "No such file")),
    (["replay", "--jobs", "2", "/nonexistent/events.jsonl"], {}, ("No such file",)),
    (["replay", "/"], {}, ("/: Is a directory",)),
    (["explain", "r1", "/nonexistent/events.jsonl"], {}, ("No such file",)),
    (["explain", "r1", "/"], {}, ("Is a directory",)),
    (["mcp-proxy", "--", "/nonexistent/server"], {}, ("/nonexistent/server", "No such file")),
    (["replay", "-"], {"STALLWATCH_BOOTSTRAP": "localhost"}, ("STALLWATCH_BOOTSTRAP=localhost", "port")),
    (["worker"], {"STALLWATCH_BOOTSTRAP": "k1:9092,k2"}, ("k2 has no port",)),
    (["top"], {"STALLWATCH_PARTITIONS": "-1"}, ("STALLWATCH_PARTITIONS",)),
    (["serve", "--host", "0.0.0.0"], {}, ("STALLWATCH_SERVE_TOKEN",)),
]


@pytest.mark.parametrize(
    ("command", "env", "words"), ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_every_error_a_user_can_cause_is_one_line_and_a_non_zero_exit(command, env, words):
    one_line(stallwatch(command, env), *words)


@pytest.mark.kafka
@pytest.mark.parametrize("command", [["top", "--once"], ["explain", "r1"]])
def test_a_reader_of_topics_that_do_not_exist_says_so_in_one_line(command):
    one_line(stallwatch(command, ON_THE_BROKER), "there is no topic", "STALLWATCH_TOPIC_PREFIX")


@pytest.mark.kafka
@pytest.mark.parametrize("command", [["top", "--once"], ["worker"]])
def test_sasl_against_a_plaintext_listener_is_named_as_a_protocol_mismatch(command):
    env = {
        **ON_THE_BROKER,
        "STALLWATCH_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "STALLWATCH_SASL_MECHANISM": "PLAIN",
        "STALLWATCH_SASL_USERNAME": "user",
        "STALLWATCH_SASL_PASSWORD": "password",
    }
    one_line(
        stallwatch(command, env), "STALLWATCH_SECURITY_PROTOCOL=SASL_PLAINTEXT", "protocol of that listener"
    )


@pytest.mark.kafka
def test_the_fleet_app_in_a_folder_it_cannot_write_says_so_in_one_line(tmp_path: Path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    result = stallwatch(["fleet"], ON_THE_BROKER, cwd=folder, wrap=WITHOUT_CAPABILITIES)
    one_line(result, str(folder), "cannot write there", "writable working directory")


def test_a_misspelt_variable_is_warned_by_name_with_the_closest_setting():
    result = stallwatch(["replay", "-"], {"STALLWATCH_PARTITONS": "4", "STALLWATCH_KAFKA_PORT": "29092"})
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "stallwatch: warning: STALLWATCH_PARTITONS is not a setting of stallwatch's and is ignored "
        "(did you mean STALLWATCH_PARTITIONS?)"
    ]


def said_only(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


@pytest.mark.kafka
def test_a_worker_on_one_broker_with_cluster_defaults_says_which_settings_to_change():
    result = stallwatch(["worker"], {"STALLWATCH_BOOTSTRAP": BOOTSTRAP})  # replication 3 by default
    said_only(
        result, "the cluster has 1 broker", "STALLWATCH_REPLICATION_FACTOR", "STALLWATCH_MIN_INSYNC_REPLICAS"
    )


def test_a_worker_with_no_broker_at_its_address_names_the_bootstrap_setting():
    result = stallwatch(["worker"], {"STALLWATCH_BOOTSTRAP": f"127.0.0.1:{free_port()}"})
    said_only(result, "no Kafka broker answers", "STALLWATCH_BOOTSTRAP")


def test_a_missing_policy_file_is_named_before_kafka_is_reached(tmp_path: Path):
    result = stallwatch(
        ["worker"],
        {
            "STALLWATCH_POLICY_FILE": str(tmp_path / "nowhere.toml"),
            "STALLWATCH_BOOTSTRAP": f"127.0.0.1:{free_port()}",
        },
    )
    said_only(result, "STALLWATCH_POLICY_FILE", "cannot read it")


@pytest.mark.parametrize(
    "content, words",
    [
        ("[tools\nrequires_approval = 1", "not valid TOML"),
        ("[tools]\nrequires_approval = 'send_*'", "must be a list"),
    ],
)
def test_a_bad_policy_file_is_named(tmp_path: Path, content: str, words: str):
    policy = tmp_path / "policy.toml"
    policy.write_text(content)
    result = stallwatch(["replay", "-"], {"STALLWATCH_POLICY_FILE": str(policy)})
    said_only(result, "STALLWATCH_POLICY_FILE", words)


def test_a_bad_number_is_named():
    said_only(stallwatch(["worker"], {"STALLWATCH_PARTITIONS": "six"}), "STALLWATCH_PARTITIONS")


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_number_that_is_not_finite_is_named(value: str):
    said_only(stallwatch(["fleet"], {"STALLWATCH_FLEET_STEP_S": value}), "STALLWATCH_FLEET_STEP_S", "finite")


def test_a_fleet_window_that_is_no_whole_number_of_steps_is_named():
    said_only(
        stallwatch(["fleet"], {"STALLWATCH_FLEET_WINDOW_S": "100", "STALLWATCH_FLEET_STEP_S": "30"}),
        "STALLWATCH_FLEET_WINDOW_S=100",
        "STALLWATCH_FLEET_STEP_S=30",
    )


def test_a_missing_library_of_the_stream_jobs_names_their_distribution():
    result = stallwatch(["worker"], {}, prelude="import sys; sys.modules['prometheus_client'] = None")
    said_only(result, "'prometheus_client'", "pip install stallwatch-streams")


@pytest.mark.parametrize(
    "adapter, module, extra",
    [
        ("langchain", "langchain", "langchain"),
        ("openai_agents", "agents", "openai-agents"),
        ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra(adapter: str, module: str, extra: str):
    code = f"import sys; sys.modules[{module!r}] = None\nimport stallwatch.adapters.{adapter}"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert f"pip install 'stallwatch[{extra}]'" in result.stderr.splitlines()[-1]


@pytest.mark.kafka
async def test_a_client_with_no_topics_says_so_and_names_the_prefix(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="stallwatch.client.kafka")
    settings = Settings(bootstrap=BOOTSTRAP, topic_prefix=f"t{uuid.uuid4().hex[:10]}", partitions=2)
    # A timeout far past what the broker takes to say the topics are missing, however busy the
    # machine: the missing topics are then the one thing the client can report.
    async with KafkaClient(settings, verdict_timeout_s=60.0) as client:
        assert not client.connected
    (said,) = [r.getMessage() for r in caplog.records]
    assert "do not exist" in said and "STALLWATCH_TOPIC_PREFIX" in said and "stallwatch worker" in said


@pytest.mark.kafka
def test_a_port_in_use_names_its_setting():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = stallwatch(
            ["worker"],
            {
                "STALLWATCH_BOOTSTRAP": BOOTSTRAP,
                "STALLWATCH_WEB_PORT": str(port),
                "STALLWATCH_REPLICATION_FACTOR": "1",
                "STALLWATCH_MIN_INSYNC_REPLICAS": "1",
            },
        )
    said_only(result, "STALLWATCH_WEB_PORT", f"127.0.0.1:{port}")


@pytest.mark.parametrize(
    ("command", "env", "words"),
    [
        (
            ["worker"],
            {"STALLWATCH_SECURITY_PROTOCOL": "sasl_tls"},
            ("STALLWATCH_SECURITY_PROTOCOL='sasl_tls'", "SASL_SSL"),
        ),
        (
            ["fleet"],
            {"STALLWATCH_SECURITY_PROTOCOL": "sasl_ssl", "STALLWATCH_SASL_MECHANISM": "plain"},
            ("STALLWATCH_SASL_MECHANISM=PLAIN needs STALLWATCH_SASL_USERNAME",),
        ),
        (["replay", "-"], {"STALLWATCH_SASL_MECHANISM": "SCRAM-SHA-1"}, ("STALLWATCH_SASL_MECHANISM",)),
    ],
)
def test_a_bad_kafka_security_setting_is_one_line_and_exit_2(command, env, words):
    result = stallwatch(command, env)
    said_only(result, *words)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_encrypted_key_without_its_passphrase_is_named(tmp_path: Path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=c",
            "-passout",
            "pass:secret passphrase",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    result = stallwatch(
        ["top", "--once"],
        {
            "STALLWATCH_SECURITY_PROTOCOL": "SSL",
            "STALLWATCH_SSL_CERTFILE": str(cert),
            "STALLWATCH_SSL_KEYFILE": str(key),
        },
    )
    said_only(result, "encrypted", "STALLWATCH_SSL_KEY_PASSWORD")
