"""Shell-style globs (`search*`, `db_?`, `[ab]_tool`) over names from events, matched on RE2.

The standard library's fnmatch translates a glob to a backtracking `re` pattern; tool names come
from untrusted events, so the globs run on RE2 instead: linear in the name whatever the glob."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2


def glob_matches(name: str, pattern: str) -> bool:
    """`fnmatch.fnmatchcase(name, pattern)`: `*` any run, `?` one character, `[seq]` and
    `[!seq]` one of (or none of) a set; case-sensitive."""
    return _compiled(pattern).fullmatch(name) is not None


@lru_cache(maxsize=1024)  # globs come from operators' settings and policy files: few
def _compiled(pattern: str) -> Any:
    options = re2.Options()
    options.dot_nl = True  # fnmatch's `*` and `?` match newlines too
    return re2.compile(_translated(pattern), options)


def _translated(pattern: str) -> str:
    """The glob as an RE2 expression, read left to right once, as fnmatch.translate reads it."""
    out: list[str] = []
    i, end = 0, len(pattern)
    while i < end:
        char = pattern[i]
        i += 1
        if char == "*":
            if not out or out[-1] != ".*":  # runs of `*` are one
                out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[":
            close = i + 1 if i < end and pattern[i] == "!" else i
            close = close + 1 if close < end and pattern[close] == "]" else close
            close = pattern.find("]", close)
            if close < 0:
                out.append(re2.escape("["))
            else:
                out.append(_char_class(pattern, i, close))
                i = close + 1
        else:
            out.append(re2.escape(char))
    return "".join(out)


def _char_class(pattern: str, start: int, close: int) -> str:
    """`[...]` between `start` and `close` as an RE2 class of code point ranges: `a-z` is a range,
    a reversed range is empty, `-` first or last is itself, `!` first negates."""
    chunks: list[str] = []
    first = start + 1 if pattern[start] == "!" else start
    at, k = start, first + 1
    while (k := pattern.find("-", k, close)) >= 0:
        chunks.append(pattern[at:k])
        at, k = k + 1, k + 3
    if pattern[at:close]:
        chunks.append(pattern[at:close])
    else:
        chunks[-1] += "-"
    for k in range(len(chunks) - 1, 0, -1):  # drop reversed ranges with their ends
        if chunks[k - 1][-1] > chunks[k][0]:
            chunks[k - 1] = chunks[k - 1][:-1] + chunks[k][1:]
            del chunks[k]
    negated = chunks[0][:1] == "!"
    if negated:
        chunks[0] = chunks[0][1:]
    spans: list[tuple[str, str]] = []
    for k, chunk in enumerate(chunks):
        if k:
            spans.append((chunks[k - 1][-1], chunk[0]))
        inner = chunk[1 if k else 0 : len(chunk) - 1 if k < len(chunks) - 1 else len(chunk)]
        spans.extend((c, c) for c in inner)
    if not spans:
        return "." if negated else "[^\\x{0}-\\x{10ffff}]"
    body = "".join(f"\\x{{{ord(lo):x}}}-\\x{{{ord(hi):x}}}" for lo, hi in spans)
    return f"[{'^' if negated else ''}{body}]"
