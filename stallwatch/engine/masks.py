"""Volatile patterns: regular expressions whose matches are masked in string results before hashing,
within the scan budget per event (in UTF-8 bytes) that `stallwatch.contract.patterns` states."""

from __future__ import annotations

from typing import Any

# The default set and the mask are defined with the contract, which validates declared lists the
# same way (hence the explicit re-exports).
from stallwatch.contract.patterns import DEFAULT_VOLATILE_PATTERNS as DEFAULT_VOLATILE_PATTERNS
from stallwatch.contract.patterns import MASK as MASK
from stallwatch.contract.patterns import MASK_EVENT_MATCHES, MASK_STRING_COST, Compiled, compiled


def effective_patterns(mode: str, declared: list[str] | None) -> tuple[str, ...]:
    """A tool's own list replaces the default set; only coder mode has a default set."""
    if declared is not None:
        return tuple(declared)
    return DEFAULT_VOLATILE_PATTERNS if mode == "coder" else ()


def mask_strings(value: Any, patterns: tuple[str, ...]) -> Any:
    """The value with matches of the patterns masked in the strings it holds (dict keys stay as
    they are), in document order while the event's scan budget lasts: a string that does not fit
    in what is left stays whole. The input is not changed."""
    if not patterns:
        return value
    try:
        return _Masking(compiled(patterns)).mask(value)
    except RecursionError:  # nesting near orjson's limit: cannot compare, so never a repeat
        raise ValueError("value nests too deep to mask") from None


def _utf8_length(text: str) -> int:
    """The bytes RE2 scans for `text`; a string with lone surrogates, which RE2 cannot take,
    counts as too long to mask (kept whole)."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return 1 << 62


class _Masking:
    """One value's masking, with what is left of its budget."""

    __slots__ = ("bytes", "matches", "patterns")

    def __init__(self, patterns: Compiled) -> None:
        self.patterns = patterns
        self.bytes = patterns.scan_bytes
        self.matches = MASK_EVENT_MATCHES

    def mask(self, value: Any) -> Any:
        if type(value) is str:
            if len(value) + MASK_STRING_COST > self.bytes or not self.matches:
                return value
            cost = _utf8_length(value) + MASK_STRING_COST  # RE2 scans bytes
            if cost > self.bytes:
                return value
            self.bytes -= cost
            masked, found = self.patterns.sub(value, self.matches)
            self.matches -= found
            return masked
        if type(value) is dict:
            return {k: self.mask(v) for k, v in value.items()}
        if type(value) is list:
            return [self.mask(v) for v in value]
        return value
