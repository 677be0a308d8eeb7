"""Kafka security settings: protocol and mechanism checked where they are read, an encrypted
client key opened with its passphrase in every TLS context (client, worker, fleet app), and
OAUTHBEARER through a token provider named by a setting."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import faust
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.abc import AbstractTokenProvider

from stallwatch.kafka.options import aiokafka_options, oauth_token_provider, ssl_context
from stallwatch.settings import Settings, SetupError
from stallwatch_streams.fleet.service import faust_credentials

PASSPHRASE = "correct horse battery staple"


class StaticToken(AbstractTokenProvider):
    """A token provider as a user would write one (AWS MSK IAM's signer behind it, say)."""

    async def token(self) -> str:
        return "a-token"


def not_a_provider() -> object:
    return object()


@pytest.fixture(scope="module")
def encrypted_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed client certificate and its private key encrypted with PASSPHRASE."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "client.pem", folder / "client.key"
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
            "/CN=stallwatch-client",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-passout",
            f"pass:{PASSPHRASE}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert b"ENCRYPTED" in key.read_bytes()
    return cert, key


def tls_settings(cert: Path, key: Path, password: str | None) -> Settings:
    return Settings(
        security_protocol="SSL",
        ssl_cafile=str(cert),
        ssl_certfile=str(cert),
        ssl_keyfile=str(key),
        ssl_key_password=password,
    )


def client_certificate_seen(context: ssl.SSLContext, cert: Path) -> str:
    """A TLS server on loopback that requires a client certificate signed by `cert`: the
    subject it received over a real handshake with `context`."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(
        str(cert), str(cert).replace("client.pem", "client.key"), password=PASSPHRASE
    )
    server_context.verify_mode = ssl.CERT_REQUIRED
    server_context.load_verify_locations(str(cert))
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[str] = []

    def serve() -> None:
        connection, _ = listener.accept()
        with server_context.wrap_socket(connection, server_side=True) as tls:
            subject = dict(part[0] for part in tls.getpeercert()["subject"])
            seen.append(subject["commonName"])

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with (
            socket.create_connection(listener.getsockname(), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            tls.do_handshake()
    finally:
        thread.join(10)
        listener.close()
    return seen[0]


def test_an_encrypted_key_is_opened_in_every_context_the_project_builds(encrypted_key):
    cert, key = encrypted_key
    settings = tls_settings(cert, key, PASSPHRASE)
    contexts = {
        "ssl_context": ssl_context(settings),
        "worker and client": aiokafka_options(settings)["ssl_context"],
        "fleet app": faust_credentials(settings).context,
    }
    for where, context in contexts.items():
        assert client_certificate_seen(context, cert) == "stallwatch-client", where


def test_the_passphrase_is_a_secret(encrypted_key):
    settings = tls_settings(*encrypted_key, PASSPHRASE)
    assert PASSPHRASE not in repr(settings)
    assert "battery" not in repr(settings) and "battery" not in str(settings)


def test_a_missing_or_wrong_passphrase_is_named_not_prompted_for(encrypted_key):
    with pytest.raises(SetupError, match="STALLWATCH_SSL_KEY_PASSWORD") as missing:
        ssl_context(tls_settings(*encrypted_key, None))
    with pytest.raises(SetupError, match="wrong STALLWATCH_SSL_KEY_PASSWORD") as wrong:
        ssl_context(tls_settings(*encrypted_key, "not it"))
    for caught in (missing, wrong):
        assert "\n" not in str(caught.value) and PASSPHRASE not in str(caught.value)


def test_lower_case_values_are_read_as_kafkas_clients_read_them():
    settings = Settings(
        security_protocol="sasl_plaintext",
        sasl_mechanism="scram-sha-512",
        sasl_username="fleet",
        sasl_password="pw",
    )
    assert (settings.security_protocol, settings.sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-512")
    # The fleet app connected with no credentials at all when the protocol was lower case.
    credentials = faust_credentials(settings)
    assert isinstance(credentials, faust.SASLCredentials) and credentials.username == "fleet"
    assert aiokafka_options(settings)["sasl_plain_username"] == "fleet"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        (
            {"security_protocol": "TLS"},
            "STALLWATCH_SECURITY_PROTOCOL='TLS': expected one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        ),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "STALLWATCH_SASL_MECHANISM='GSSAPI'"),
        ({"security_protocol": "SASL_SSL"}, "needs STALLWATCH_SASL_MECHANISM"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u"},
            "needs STALLWATCH_SASL_USERNAME and STALLWATCH_SASL_PASSWORD",
        ),
        ({"sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "p"}, "uses no SASL"),
        (
            {"ssl_cafile": "/ca.pem"},
            "STALLWATCH_SSL_CAFILE is set but STALLWATCH_SECURITY_PROTOCOL=PLAINTEXT",
        ),
        ({"security_protocol": "SSL", "ssl_keyfile": "/k.pem"}, "STALLWATCH_SSL_CERTFILE is not"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
            "needs STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER",
        ),
        ({"sasl_oauth_token_provider": "x:y"}, "set OAUTHBEARER"),
    ],
)
def test_a_bad_combination_names_the_variable_to_change(fields, says):
    with pytest.raises(SetupError) as caught:
        Settings(**fields)
    assert says in str(caught.value) and "\n" not in str(caught.value)


async def test_oauthbearer_takes_the_named_token_provider_for_aiokafka_and_faust():
    settings = Settings(
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=f"{__name__}:StaticToken",
    )
    options = aiokafka_options(settings)
    assert isinstance(options["sasl_oauth_token_provider"], StaticToken)
    assert options["sasl_oauth_token_provider"] is oauth_token_provider(settings)  # one per process
    # aiokafka accepts them as they are (it checks the provider's type); nothing is started.
    assert (
        AIOKafkaProducer(**options).client._sasl_oauth_token_provider is options["sasl_oauth_token_provider"]
    )
    credentials = faust_credentials(settings)
    assert isinstance(credentials, faust.OAuthCredentials)
    assert credentials.protocol.value == "SASL_SSL"
    assert credentials.oauth_cb is options["sasl_oauth_token_provider"]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_colon", "expected module:callable"),
        ("no_such_module_here:Provider", "cannot import it"),
        (f"{__name__}:Missing", "cannot import it"),
        (f"{__name__}:not_a_provider", "not an aiokafka.abc.AbstractTokenProvider"),
    ],
)
def test_a_bad_token_provider_is_named(spec, says):
    settings = Settings(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=spec
    )
    with pytest.raises(SetupError, match="STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER") as caught:
        aiokafka_options(settings)
    assert says in str(caught.value)
