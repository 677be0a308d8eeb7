"""A token provider for OAUTHBEARER against the local secure broker: an unsecured JWS (`alg`
`none`) whose `sub` is the principal, which Kafka's default validator accepts. For tests only;
a real cluster signs its tokens (docs/operations.md, Kafka security)."""

from __future__ import annotations

import base64
import os
import time

import orjson
from aiokafka.abc import AbstractTokenProvider

SUBJECT_ENV = "STALLWATCH_TEST_OAUTH_SUB"


def _part(value: dict) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).rstrip(b"=").decode()


class UnsecuredToken(AbstractTokenProvider):
    def __init__(self, subject: str | None = None) -> None:
        self.subject = subject or os.environ[SUBJECT_ENV]

    async def token(self) -> str:
        now = int(time.time())
        return f"{_part({'alg': 'none'})}.{_part({'sub': self.subject, 'iat': now, 'exp': now + 3600})}."
