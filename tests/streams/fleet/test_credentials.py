"""The fleet app's Kafka security: the same settings as the worker's and the client's, in Faust's terms."""

from __future__ import annotations

import ssl

import faust

from stallwatch.settings import Settings
from stallwatch_streams.fleet.service import FleetService, faust_credentials
from stallwatch_streams.fleet.settings import FleetSettings


def test_plaintext_has_no_credentials():
    assert faust_credentials(Settings()) is None


def test_sasl_over_plaintext_carries_the_mechanism_and_the_user():
    credentials = faust_credentials(
        Settings(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_username="fleet",
            sasl_password="s3cret-value",
        )
    )
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.protocol.value == "SASL_PLAINTEXT"
    assert (credentials.mechanism.value, credentials.username, credentials.password) == (
        "SCRAM-SHA-256",
        "fleet",
        "s3cret-value",
    )


def test_sasl_over_tls_and_tls_alone_carry_a_context():
    sasl = faust_credentials(
        Settings(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p")
    )
    assert sasl.protocol.value == "SASL_SSL" and isinstance(sasl.ssl_context, ssl.SSLContext)
    tls = faust_credentials(Settings(security_protocol="SSL"))
    assert isinstance(tls, faust.SSLCredentials) and tls.protocol.value == "SSL"


def test_the_app_is_built_with_them():
    base = Settings(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p"
    )
    service = FleetService(FleetSettings(base=base))
    assert service.app.conf.broker_credentials.username == "u"
