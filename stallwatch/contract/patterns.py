"""A tool's volatile patterns, compiled exactly as the engine runs them, with the bound on what
they may cost per event.

Patterns are matched against untrusted text (web pages, command output), so they run on RE2:
no backtracking. RE2 alone does not bound the cost, though: a pattern set whose automaton
outgrows RE2's memory makes it fall back to simulating the program, at a cost per byte that grows
with the program's size (a few ns per instruction), and a larger `max_mem` only delays that. So
the cost is bounded where it is decided:

- a declared set whose compiled program exceeds MAX_PROGRAM_SIZE instructions is refused when it
  is declared (RE2's `programsize`, read through the google-re2 binding);
- one event's strings are masked within a scan budget (`scan_budget`): bytes scanned (UTF-8, as
  RE2 reads them) times (program size + a fixed cost per byte) stay under MASK_WORK, at most
  MASK_EVENT_BYTES, and each string is charged a fixed MASK_STRING_COST on top of its length; a
  string that does not fit in what is left is kept whole, unmasked, which only makes a result
  look new (the safe side);
- at most MASK_EVENT_MATCHES matches are replaced per event, since each costs Python work.

RE2's syntax is Perl's without backreferences and lookaround
(https://github.com/google/re2/wiki/Syntax). A list is compiled joined, as one alternation, by the
same function that validates it, so a list that passes validation is the list the engine applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import re2

# Bounds on a tool's declared patterns: every string of every result is matched against them.
MAX_PATTERNS = 32
MAX_PATTERN_CHARS = 500
# A declared list's compiled program, in RE2 instructions: the cost per byte of RE2's slow path
# grows with it. Real lists (timestamps, ids, durations) compile to a few hundred.
MAX_PROGRAM_SIZE = 1024
# The scan budget per event: bytes x (program size + MASK_BYTE_COST) at most MASK_WORK, and
# at most MASK_EVENT_BYTES bytes. At the slow path's measured ~3.5 ns per instruction and
# ~0.6 µs per byte this keeps one event's masking near 50 ms of CPU at worst.
MASK_WORK = 1 << 24
MASK_BYTE_COST = 256
MASK_EVENT_BYTES = 64 * 1024
# What each masked string costs on top of its length: the binding's fixed work per call.
MASK_STRING_COST = 64
# Matches replaced per event: each is a Python call in the binding.
MASK_EVENT_MATCHES = 4096
# RE2's memory for one compiled list (its default is 8 MiB): mostly the DFA's cache.
_RE2_MAX_MEM = 8 << 20
# RE2's memory when a declared pattern is first compiled alone: enough for MAX_PROGRAM_SIZE
# instructions, and small, so that compiling an oversized pattern fails within a millisecond or
# two rather than building a program of megabytes first.
_RE2_VALIDATE_MEM = 256 << 10
# What a match becomes: equal after masking means equal but for volatile text.
MASK = "<volatile>"
# Coder mode's shell line counter keeps its label: `bash: line <volatile>`.
_SHELL_LINE = "bash: line "

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
    # a shell's own input line counter: `/bin/bash: line 62215: javac: command not found` (the
    # replacement keeps `bash: line `, as the lookbehind RE2 lacks would)
    r"bash: line \d+",
)


class PatternError(ValueError):
    """A declared pattern list the engine cannot apply; the message names the reason."""


@dataclass(frozen=True, slots=True)
class Compiled:
    """A pattern list as the engine applies it: the joined RE2 program, its replacement, and how
    many characters of one event it may scan."""

    regex: Any  # re2._Regexp; the binding has no public type
    replacement: str | Callable[[Any], str]
    scan_bytes: int

    def sub(self, text: str, matches: int) -> tuple[str, int]:
        """`text` with at most `matches` matches masked, and how many were."""
        masked: tuple[str, int] = self.regex.subn(self.replacement, text, count=matches)
        return masked


def scan_budget(program_size: int) -> int:
    """Bytes of one event a program of this size may scan (see the module docstring)."""
    return min(MASK_EVENT_BYTES, MASK_WORK // (program_size + MASK_BYTE_COST))


def _options(max_mem: int) -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would write each refusal to stderr; the error says it
    options.never_capture = True  # masking needs no groups; named groups cannot collide
    options.max_mem = max_mem
    return options


_OPTIONS = _options(_RE2_MAX_MEM)
_VALIDATE = _options(_RE2_VALIDATE_MEM)


def _default_replacement(match: Any) -> str:
    return _SHELL_LINE + MASK if match.group().startswith(_SHELL_LINE) else MASK


def _join(patterns: tuple[str, ...]) -> Any:
    return re2.compile("|".join(f"(?:{p})" for p in patterns), _OPTIONS)


_DEFAULT_REGEX = _join(DEFAULT_VOLATILE_PATTERNS)
_DEFAULT = Compiled(_DEFAULT_REGEX, _default_replacement, scan_budget(_DEFAULT_REGEX.programsize))


@lru_cache(maxsize=256)  # pattern lists repeat across runs; bounded, since runs declare them
def compile_declared(patterns: tuple[str, ...]) -> Compiled:
    """The declared patterns as one RE2 alternation. Raises PatternError naming the pattern that
    does not compile (or the list, when only the joined form fails or is too large). The work is
    bounded too: each pattern compiles within a small memory, and the sizes are summed as they
    come, so a list is refused at the first pattern that takes it over MAX_PROGRAM_SIZE."""
    total = 0
    for pattern in patterns:
        try:
            total += re2.compile(pattern, _VALIDATE).programsize
        except re2.error as exc:
            if "too large" in _message(exc):
                raise _too_large(f"volatile pattern {_shown(pattern)}", "far more") from None
            raise PatternError(
                f"volatile pattern {_shown(pattern)} is not an RE2 regular expression: {_message(exc)}"
            ) from None
        if total > MAX_PROGRAM_SIZE:
            raise _too_large("the volatile patterns", f"{total}")
    try:
        regex = _join(patterns)
    except re2.error as exc:
        raise PatternError(f"the volatile patterns do not compile together: {_message(exc)}") from None
    size = regex.programsize
    if size > MAX_PROGRAM_SIZE:
        raise _too_large("the volatile patterns", f"{size}")
    return Compiled(regex, MASK, scan_budget(size))


def _too_large(what: str, size: str) -> PatternError:
    return PatternError(
        f"{what} compile to {size} RE2 instructions, more than {MAX_PROGRAM_SIZE}: declare fewer or "
        "simpler patterns (counted repetitions multiply a program's size)"
    )


def compiled(patterns: tuple[str, ...]) -> Compiled:
    """The compiled form of a tool's effective patterns, for the parser and the engine alike.
    Raises PatternError."""
    if patterns == DEFAULT_VOLATILE_PATTERNS:
        return _DEFAULT
    return compile_declared(patterns)


def _message(exc: Exception) -> str:
    text = exc.args[0] if exc.args else str(exc)
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)


def _shown(pattern: str, limit: int = 60) -> str:
    return repr(pattern) if len(pattern) <= limit else f"{pattern[:limit]!r}… ({len(pattern)} characters)"
