"""Kafka connection settings shared by the worker, the client and the admin helpers."""

from __future__ import annotations

import functools
import importlib
import ssl
from typing import Any

from aiokafka.abc import AbstractTokenProvider

from stallwatch.settings import Settings, SetupError, reveal


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The one TLS context every Kafka connection of a process uses (worker, client, fleet app);
    None without TLS. An encrypted key is opened with STALLWATCH_SSL_KEY_PASSWORD."""
    if not settings.security_protocol.endswith("SSL"):
        return None
    context = ssl.create_default_context(cafile=settings.ssl_cafile)
    if settings.ssl_certfile:
        _load_client_certificate(context, settings.ssl_certfile, settings)
    return context


def _load_client_certificate(context: ssl.SSLContext, certfile: str, settings: Settings) -> None:
    def no_password() -> str:
        # Without it OpenSSL would prompt on the terminal: a worker would wait forever.
        raise SetupError(
            f"the private key in {settings.ssl_keyfile or certfile} is "
            "encrypted: set STALLWATCH_SSL_KEY_PASSWORD to its passphrase"
        )

    try:
        context.load_cert_chain(
            certfile, settings.ssl_keyfile, password=reveal(settings.ssl_key_password) or no_password
        )
    except ssl.SSLError:
        # The error holds no secret, but says nothing a user can act on (`PEM lib`).
        hint = "wrong STALLWATCH_SSL_KEY_PASSWORD, or " if settings.ssl_key_password else ""
        raise SetupError(
            f"STALLWATCH_SSL_CERTFILE={certfile!r} and its key "
            f"({settings.ssl_keyfile or 'in the same file'}) could not be loaded: "
            f"{hint}not a PEM certificate and its private key"
        ) from None
    except FileNotFoundError as exc:
        raise SetupError(
            f"no file {exc.filename!r}: check STALLWATCH_SSL_CERTFILE and STALLWATCH_SSL_KEYFILE"
        ) from None


@functools.cache
def oauth_token_provider(settings: Settings) -> AbstractTokenProvider:
    """The token provider STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER names (`module:callable`): a class
    or a factory returning an aiokafka AbstractTokenProvider, called once per settings, so that
    every client of a process shares one provider (and its cached token)."""
    spec = settings.sasl_oauth_token_provider or ""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SetupError(f"STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER={spec!r}: expected module:callable")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise SetupError(f"STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER={spec!r}: cannot import it ({exc})") from None
    provider = factory()
    if not isinstance(provider, AbstractTokenProvider):
        raise SetupError(
            f"STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER={spec!r} returned a "
            f"{type(provider).__name__}, not an aiokafka.abc.AbstractTokenProvider"
        )
    return provider


def failover_options(settings: Settings) -> dict[str, Any]:
    """How soon a client gives up on a broker that does not answer and learns where the
    partitions and coordinators moved (docs/operations.md, "A broker fails"). The project's
    clients (stallwatch/kafka/aiokafka_patch.py) also take one connection lock per broker and
    ask the brokers they are connected to for metadata first."""
    return {
        "request_timeout_ms": settings.kafka_request_timeout_ms,
        "metadata_max_age_ms": settings.kafka_metadata_max_age_ms,
    }


def aiokafka_options(settings: Settings) -> dict[str, Any]:
    """Connection keyword arguments for the project's producer, consumer and admin client
    (stallwatch/kafka/aiokafka_patch.py), with the failover options."""
    return {**connection_options(settings), **failover_options(settings)}


def connection_options(settings: Settings) -> dict[str, Any]:
    """The broker's address, the security protocol and the settings' credentials alone."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "security_protocol": settings.security_protocol,
    }
    if settings.sasl_mechanism == "OAUTHBEARER":
        options.update(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=oauth_token_provider(settings))
    elif settings.sasl_mechanism:
        options.update(
            sasl_mechanism=settings.sasl_mechanism,
            sasl_plain_username=settings.sasl_username,
            sasl_plain_password=reveal(settings.sasl_password),
        )
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    return options
