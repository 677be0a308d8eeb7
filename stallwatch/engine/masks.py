"""Volatile patterns: regular expressions whose matches are masked in string results before hashing."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

# Coder mode's default set, used for every tool that declares no `volatile_patterns` of its own.
# Without it a test run that prints its own duration, or a repr with a memory address, looks
# like a new result every time, and a stall (the same failure after each edit) goes unseen.
DEFAULT_VOLATILE_PATTERNS = (
    # durations: `in 0.05s`, `took 12 ms`, `1.5 seconds`, `Ran 3 tests in 0.001s`
    r"\b\d+(?:\.\d+)?\s?(?:ms|us|µs|ns|s|sec|secs|seconds?|minutes?|min)\b",
    # memory addresses: `<Foo object at 0x7f3a2c1b9d60>`
    r"\b0x[0-9a-fA-F]{6,16}\b",
    # ISO 8601 timestamps: `2024-05-01T12:00:03.123Z`, `2024-05-01 12:00:03+02:00`
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?",
    # a shell's own input line counter: `/bin/bash: line 62215: javac: command not found`
    r"(?<=bash: line )\d+",
)
# What a match becomes: equal after masking means equal but for volatile text.
MASK = "<volatile>"


def effective_patterns(mode: str, declared: list[str] | None) -> tuple[str, ...]:
    """A tool's own list replaces the default set; only coder mode has a default set."""
    if declared is not None:
        return tuple(declared)
    return DEFAULT_VOLATILE_PATTERNS if mode == "coder" else ()


@lru_cache(maxsize=256)  # pattern lists repeat across runs; bounded, since runs declare them
def _compiled(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns))


def mask_strings(value: Any, patterns: tuple[str, ...]) -> Any:
    """The value with every match of the patterns masked in every string it holds (dict keys
    stay as they are); the input is not changed."""
    if not patterns:
        return value
    try:
        return _mask(value, _compiled(patterns))
    except RecursionError:  # nesting near orjson's limit: cannot compare, so never a repeat
        raise ValueError("value nests too deep to mask") from None


def _mask(value: Any, regex: re.Pattern[str]) -> Any:
    if type(value) is str:
        return regex.sub(MASK, value)
    if type(value) is dict:
        return {k: _mask(v, regex) for k, v in value.items()}
    if type(value) is list:
        return [_mask(v, regex) for v in value]
    return value

