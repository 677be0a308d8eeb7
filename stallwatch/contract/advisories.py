"""Fleet advisories signed by the fleet app: a keyed MAC that workers and replay check, so that
only a holder of STALLWATCH_ADVISORY_KEY (the fleet app) can advise a run.

The MAC is keyed BLAKE2b-128 over the advisory's canonical JSON (sorted keys, no whitespace)
without its `mac` field, as 32 hex digits in `mac`. It is checked on the JSON as read from the
record, before validation, so that nothing validation adds or reshapes can change what was
signed. The key is never the fingerprint key: runtimes hold that one.
"""

from __future__ import annotations

import hmac
from hashlib import blake2b
from typing import Any

import orjson

MAC_FIELD = "mac"
_KEY_PERSON = b"stallwatch-adv"


def advisory_key(key_text: str) -> bytes:
    """The 32-byte key behind every advisory's MAC, from STALLWATCH_ADVISORY_KEY."""
    return blake2b(key_text.encode(), digest_size=32, person=_KEY_PERSON).digest()


def advisory_key_of(key_text: str | None) -> bytes | None:
    """`advisory_key` of STALLWATCH_ADVISORY_KEY, or None (advisories unsigned) without one."""
    return advisory_key(key_text) if key_text else None


def advisory_mac(advisory: dict[str, Any], key: bytes) -> str:
    unsigned = {k: v for k, v in advisory.items() if k != MAC_FIELD}
    data = orjson.dumps(unsigned, option=orjson.OPT_SORT_KEYS)
    return blake2b(data, key=key, digest_size=16).hexdigest()


def signed(advisory: dict[str, Any], key: bytes) -> dict[str, Any]:
    """The advisory with its MAC, as the fleet app writes it."""
    return {**advisory, MAC_FIELD: advisory_mac(advisory, key)}


def verified(advisory: dict[str, Any], key: bytes) -> bool:
    """True when the advisory carries the MAC of its own content under `key`."""
    mac = advisory.get(MAC_FIELD)
    if type(mac) is not str:
        return False
    try:
        expected = advisory_mac(advisory, key)
    except (TypeError, orjson.JSONEncodeError):  # content with no canonical form: never signed
        return False
    return hmac.compare_digest(mac, expected)
