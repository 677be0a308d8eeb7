"""Canonical JSON, call signatures, result fingerprints and the structural emptiness walk."""

from __future__ import annotations

from hashlib import blake2b
from typing import Any

import orjson

# 16 bytes (128 bits) makes an accidental collision between two results of one run
# unthinkable while keeping each fingerprint held in a run's state small.
DIGEST_SIZE = 16

_SORT = orjson.OPT_SORT_KEYS
_JSON_OPENERS = frozenset("{[")


def canonical_bytes(value: Any) -> bytes:
    """JSON with sorted keys and no whitespace: equal values give equal bytes.

    Raises ValueError for values orjson cannot encode (nesting deeper than 255 levels,
    integers wider than 64 bits).
    """
    try:
        return orjson.dumps(value, option=_SORT)
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"value cannot be put in canonical JSON: {exc}") from None


def parse_json_text(value: Any) -> Any:
    """A string holding JSON text becomes the value it holds; anything else is returned as is.

    Only object and array texts are parsed: a plain string such as "42" or "true" stays a
    string, so a search for the text "42" never compares equal to the number 42.
    """
    if isinstance(value, str) and value.lstrip()[:1] in _JSON_OPENERS:
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def call_signature(tool: str, args: Any) -> bytes:
    """Digest of tool name and arguments compared as values (key order, whitespace ignored)."""
    h = blake2b(tool.encode(), digest_size=DIGEST_SIZE)
    h.update(b"\x00")
    h.update(canonical_bytes(parse_json_text(args)))
    return h.digest()


def result_fingerprint(result: Any) -> str:
    """Hex digest of a tool result's canonical content. The same function runs in the client."""
    return blake2b(canonical_bytes(parse_json_text(result)), digest_size=DIGEST_SIZE).hexdigest()


def is_empty(value: Any) -> bool:
    """True when the value holds nothing but empty containers, empty strings, 0, false and null.

    A top-level string holding JSON text is walked as the value it holds. Iterative, so no
    nesting depth can exhaust the interpreter's stack; stops at the first non-empty scalar.
    """
    stack = [parse_json_text(value)]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif item:  # non-empty strings, non-zero numbers, true; None is falsy
            return False
    return True
