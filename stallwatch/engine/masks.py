"""Volatile patterns: regular expressions whose matches are masked in string results before hashing."""

from __future__ import annotations

from typing import Any

# The default set is defined with the contract, which validates declared lists the same way.
from stallwatch.contract.patterns import DEFAULT_VOLATILE_PATTERNS as DEFAULT_VOLATILE_PATTERNS
from stallwatch.contract.patterns import Matcher, compiled

# What a match becomes: equal after masking means equal but for volatile text.
MASK = "<volatile>"


def effective_patterns(mode: str, declared: list[str] | None) -> tuple[str, ...]:
    """A tool's own list replaces the default set; only coder mode has a default set."""
    if declared is not None:
        return tuple(declared)
    return DEFAULT_VOLATILE_PATTERNS if mode == "coder" else ()


def mask_strings(value: Any, patterns: tuple[str, ...]) -> Any:
    """The value with every match of the patterns masked in every string it holds (dict keys
    stay as they are); the input is not changed."""
    if not patterns:
        return value
    try:
        return _mask(value, compiled(patterns))
    except RecursionError:  # nesting near orjson's limit: cannot compare, so never a repeat
        raise ValueError("value nests too deep to mask") from None


def _mask(value: Any, regex: Matcher) -> Any:
    if type(value) is str:
        return regex.sub(MASK, value)
    if type(value) is dict:
        return {k: _mask(v, regex) for k, v in value.items()}
    if type(value) is list:
        return [_mask(v, regex) for v in value]
    return value
