"""Names and labels taken from events, made safe to show: to the model (quoted as code) and to a
terminal (control characters escaped).

A tool name, a coder command label or any other string an event carries is written by whoever
publishes the event. Copied verbatim it could end a line of the words stallwatch gives the model
and start an instruction of its own, reorder what follows (bidi overrides), hide text
(zero-width and tag characters), or drive an operator's terminal (escape sequences).
"""

from __future__ import annotations

import unicodedata

import re2

# Characters of a name in words for the model: real tool names are far shorter; a long one is
# cut, so no name can make a refusal a page of someone else's text.
NAME_CHARS = 64
# A coder call's label (a command as the model wrote it) is longer: enough to recognise it.
LABEL_CHARS = 80
ELLIPSIS = "…"
# What stands for a name with nothing printable in it.
UNPRINTABLE = "?"

# Every escape sequence of ECMA-48 as a whole, in its 7-bit (ESC ...) and 8-bit (C1) forms:
# control strings (OSC, DCS, SOS, PM, APC) up to their terminator or the end of the text, then
# CSI with its parameters, then the two-character escapes. Removing only the ESC would leave
# `[31m` or `]8;;http://...` behind.
_ESCAPES = re2.compile(
    r"(?s)(?:\x1b[\]PX^_]|[\x{90}\x{98}\x{9d}\x{9e}\x{9f}]).*?(?:\x07|\x1b\\|\x{9c}|\z)"
    r"|(?:\x1b\[|\x{9b})[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -/]*[0-~]?"
)
# What of a name is read at all: far more than any limit shows, so the work per name is bounded.
_READ_CHARS = 4096
# Unicode categories never shown: controls (newlines, tabs, ESC, C1), format characters (bidi
# overrides and isolates, zero-width characters, tag characters), lone surrogates, and the line
# and paragraph separators.
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))


def plain(name: str, limit: int = NAME_CHARS) -> str:
    """`name` as one line of visible text, for a template that puts it between backticks itself:
    escape sequences and hidden characters removed (a control or separator becomes a space),
    whitespace runs as one space, backticks as apostrophes (a backtick would end the code
    span), at most `limit` characters (cut with an ellipsis)."""
    if (
        name.isprintable()
        and "`" not in name
        and len(name) <= limit
        and name.strip() == name
        and "  " not in name
        and name
    ):
        return name  # the common case: a plain identifier
    text = _ESCAPES.sub("", name[:_READ_CHARS])
    shown = []
    for char in text:
        category = unicodedata.category(char)
        if category in _HIDDEN:
            if category != "Cf" and category != "Cs":
                shown.append(" ")  # a newline or tab separated words: keep them apart
        elif category == "Zs":
            shown.append(" ")
        else:
            shown.append("'" if char == "`" else char)
    text = " ".join("".join(shown).split())
    if not text:
        return UNPRINTABLE
    return text if len(text) <= limit else text[: limit - len(ELLIPSIS)] + ELLIPSIS


def quoted(name: str, limit: int = NAME_CHARS) -> str:
    """`name` as inline code in words for the model: `plain`, between backticks."""
    return f"`{plain(name, limit)}`"


def printable(value: object) -> str:
    """`str(value)` for a terminal: every control, format, surrogate or separator character
    written as its escape (`\\x1b`, `\\u202e`), so that nothing printed can move the cursor,
    recolour or clear the screen, start a line, or reorder what follows."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(_escaped(char) if unicodedata.category(char) in _HIDDEN else char for char in text)


def _escaped(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
