"""What the rules compare: a runtime's fingerprints as digests, and the digests of a result's facts."""

from __future__ import annotations

from typing import Any

from stallwatch.contract.events import RawEvent
from stallwatch.engine.canonical import DIGEST_SIZE, declared_view, digest, fact_digest, fingerprint


def tool_spec(tool: dict[str, Any]) -> dict[str, Any]:
    """What the engine keeps of a tool's declarations (`patterns` only when it declares some)."""
    spec = {"volatile": tool.get("volatile_fields") or [], "facts": tool.get("facts")}
    if tool.get("volatile_patterns") is not None:
        spec["patterns"] = tool["volatile_patterns"]
    return spec


def fingerprint_digest(fingerprint: str, secret: bytes | None) -> bytes:
    """A runtime's fingerprint (or args digest) as 16 bytes: ours is hex already (keyed by the
    runtime); any other text is hashed."""
    if len(fingerprint) == 2 * DIGEST_SIZE:
        try:
            return bytes.fromhex(fingerprint)
        except ValueError:
            pass
    return digest(fingerprint.encode(), secret)


def result_digests(event: RawEvent, spec: dict[str, Any] | None, secret: bytes | None) -> list[bytes] | None:
    """The digests that identify a result's facts: the whole result's, or one per item for a
    tool that declares facts. None when the result counts as new whatever was seen before:
    empty, without content or fingerprint, or impossible to put in canonical form."""
    if "result" in event:
        try:
            if spec is None:
                found = fact_digest(event["result"], secret)
            else:
                view, items = declared_view(
                    event["tool"],
                    event["result"],
                    spec["volatile"],
                    spec["facts"],
                    tuple(spec.get("patterns") or ()),
                    secret,
                )
                if items is not None:
                    return items or None  # an empty item list is an empty result
                found = fact_digest(view, secret)
        except ValueError:
            return None
        return None if found is None else [found]
    if event.get("fingerprint") is None or event["empty"]:
        return None
    given = event.get("fact_fingerprints") if spec and spec["facts"] else None
    if given is not None:
        return [fingerprint_digest(f, secret) for f in given] or None
    return [fingerprint_digest(event["fingerprint"], secret)]


def coder_digests(
    event: RawEvent, spec: dict[str, Any] | None, patterns: tuple[str, ...], secret: bytes | None
) -> tuple[bytes | None, list[bytes] | None, bool, bool]:
    """Coder mode: (the whole result's digest, None without content or comparison; its fact
    digests, None when it counts as new whatever was seen; whether those are a list's items;
    whether the result is empty, as contract v1's walk or the runtime's `empty` says).
    Unlike v1, an empty whole result is a fact like any other: it is held under its call's
    signature, so only the same command printing nothing again is already seen."""
    facts = spec["facts"] if spec else None
    if "result" in event:
        try:
            view, items = declared_view(
                event["tool"], event["result"], spec["volatile"] if spec else [], facts, patterns, secret
            )
            hexdigest, empty = fingerprint(view, secret)
        except ValueError:
            return None, None, False, False
        whole = bytes.fromhex(hexdigest)
        if items is not None:
            return whole, items or None, True, empty
        return whole, [whole], False, empty  # empty too: a command printing nothing again is a repeat
    if event.get("fingerprint") is None:
        return None, None, False, False
    whole = fingerprint_digest(event["fingerprint"], secret)
    empty = bool(event.get("empty"))
    given = event.get("fact_fingerprints") if facts else None
    if given is not None:
        return whole, [fingerprint_digest(f, secret) for f in given] or None, True, empty
    return whole, [whole], False, empty
