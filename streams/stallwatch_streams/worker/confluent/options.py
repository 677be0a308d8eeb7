"""librdkafka's configuration from the settings: the same cluster, security and failover
options as the aiokafka clients (stallwatch/kafka/options.py)."""

from __future__ import annotations

from typing import Any

from stallwatch.settings import Settings, SetupError, reveal


def librdkafka_options(settings: Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap,
        "security.protocol": settings.security_protocol,
        "socket.timeout.ms": settings.kafka_request_timeout_ms,
        "topic.metadata.refresh.interval.ms": settings.kafka_metadata_max_age_ms,
        # librdkafka logs through its own callbacks; the worker's log says what it acts on.
        "log_level": 3,
        # A verdict is one small record: Nagle's algorithm would hold it for the previous one's
        # acknowledgement (aiokafka sets TCP_NODELAY too).
        "socket.nagle.disable": True,
    }
    if settings.sasl_mechanism == "OAUTHBEARER":
        raise SetupError(
            "STALLWATCH_TRANSACTION_MODEL=group does not take SASL OAUTHBEARER yet: "
            "use the partition model, or PLAIN/SCRAM"
        )
    if settings.sasl_mechanism:
        options.update(
            {
                "sasl.mechanism": settings.sasl_mechanism,
                "sasl.username": settings.sasl_username,
                "sasl.password": reveal(settings.sasl_password),
            }
        )
    if settings.security_protocol.endswith("SSL"):
        if settings.ssl_cafile:
            options["ssl.ca.location"] = settings.ssl_cafile
        if settings.ssl_certfile:
            options["ssl.certificate.location"] = settings.ssl_certfile
        if settings.ssl_keyfile:
            options["ssl.key.location"] = settings.ssl_keyfile
        if settings.ssl_key_password is not None:
            options["ssl.key.password"] = reveal(settings.ssl_key_password)
    return options
