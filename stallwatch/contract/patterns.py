"""A tool's declared volatile patterns, compiled exactly as the engine runs them.

Declared patterns come from runtimes and are matched against untrusted text (web pages, command
output), so they run on RE2, whose matching time is linear in the text's length whatever the
pattern: no pattern can make one result take seconds. RE2's syntax is Perl's without
backreferences and lookaround (https://github.com/google/re2/wiki/Syntax). The patterns are
compiled joined, as one alternation, by the same function that validates them, so a list that
passes validation is the list the engine applies.

The engine's own default set (coder mode) is fixed, reviewed for linear matching, and uses a
lookbehind RE2 lacks, so it runs on Python's `re`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Protocol

import re2

# Bounds on a tool's declared patterns: every string of every result is matched against them.
MAX_PATTERNS = 32
MAX_PATTERN_CHARS = 500
# RE2's memory for one compiled list (its default is 8 MiB): the DFA's cache, the bound on how
# much matching state one declaration can claim.
_RE2_MAX_MEM = 8 << 20


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


class Matcher(Protocol):
    def sub(self, repl: str, string: str) -> str: ...


class PatternError(ValueError):
    """A declared pattern list the engine cannot apply; the message names the reason."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would write each refusal to stderr; the error says it
    options.never_capture = True  # masking needs no groups; named groups cannot collide
    options.max_mem = _RE2_MAX_MEM
    return options


_OPTIONS = _options()
_DEFAULT: Matcher = re.compile("|".join(f"(?:{p})" for p in DEFAULT_VOLATILE_PATTERNS))


@lru_cache(maxsize=256)  # pattern lists repeat across runs; bounded, since runs declare them
def compile_declared(patterns: tuple[str, ...]) -> Matcher:
    """The declared patterns as one RE2 alternation. Raises PatternError naming the pattern that
    does not compile (or the list, when only the joined form fails)."""
    for pattern in patterns:
        try:
            re2.compile(pattern, _OPTIONS)
        except re2.error as exc:
            raise PatternError(
                f"volatile pattern {_shown(pattern)} is not an RE2 regular expression: {_message(exc)}"
            ) from None
    try:
        return re2.compile("|".join(f"(?:{p})" for p in patterns), _OPTIONS)
    except re2.error as exc:
        raise PatternError(f"the volatile patterns do not compile together: {_message(exc)}") from None


def compiled(patterns: tuple[str, ...]) -> Matcher:
    """The matcher of a tool's effective patterns, for the parser and the engine alike: the
    default set on Python's `re`, any other list on RE2. Raises PatternError."""
    if patterns == DEFAULT_VOLATILE_PATTERNS:
        return _DEFAULT
    return compile_declared(patterns)


def _message(exc: Exception) -> str:
    text = exc.args[0] if exc.args else str(exc)
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)


def _shown(pattern: str, limit: int = 60) -> str:
    return repr(pattern) if len(pattern) <= limit else f"{pattern[:limit]!r}… ({len(pattern)} characters)"
