"""A token provider for OAUTHBEARER against the local secure broker: an unsecured JWS (`alg`
`none`) whose `sub` is the principal, which Kafka's default validator accepts. For tests only;
a real cluster signs its tokens (docs/operations.md, Kafka security).

STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER=tests.security.oauth_token:as_PRINCIPAL names the principal
in the setting itself, so each Settings (and each process) authenticates as its own."""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Callable

import orjson
from aiokafka.abc import AbstractTokenProvider

PREFIX = "as_"


def _part(value: dict) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).rstrip(b"=").decode()


class UnsecuredToken(AbstractTokenProvider):
    def __init__(self, subject: str) -> None:
        self.subject = subject

    async def token(self) -> str:
        now = int(time.time())
        return f"{_part({'alg': 'none'})}.{_part({'sub': self.subject, 'iat': now, 'exp': now + 3600})}."


def provider_spec(principal: str) -> str:
    """The STALLWATCH_SASL_OAUTH_TOKEN_PROVIDER value that authenticates as `principal`."""
    return f"{__name__}:{PREFIX}{principal}"


def __getattr__(name: str) -> Callable[[], UnsecuredToken]:
    # `as_tenant-a` is no identifier, hence a module __getattr__ rather than one function a name.
    if name.startswith(PREFIX) and len(name) > len(PREFIX):
        return functools.partial(UnsecuredToken, name[len(PREFIX) :])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
