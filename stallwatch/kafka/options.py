"""Kafka connection settings shared by the worker, the client and the admin helpers."""

from __future__ import annotations

import ssl
from typing import Any

from stallwatch.settings import Settings


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if not settings.security_protocol.endswith("SSL"):
        return None
    context = ssl.create_default_context(cafile=settings.ssl_cafile)
    if settings.ssl_certfile:
        context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
    return context


def aiokafka_options(settings: Settings) -> dict[str, Any]:
    """Connection keyword arguments for aiokafka's producer, consumer and admin client."""
    options: dict[str, Any] = {"bootstrap_servers": settings.bootstrap,
                               "security_protocol": settings.security_protocol}
    if settings.sasl_mechanism:
        options.update(sasl_mechanism=settings.sasl_mechanism,
                       sasl_plain_username=settings.sasl_username,
                       sasl_plain_password=settings.sasl_password)
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    return options
