"""Which shell commands only read the workspace: the effect declared for a shell call (coding
agents' hooks, the trajectories benchmark's converters)."""

# The rule: a command reads when every part of it (split at `&&`, `||`, `;`, `|`, `&`, newlines)
# runs a program from READ_ONLY, with none of that program's writing options (also as a letter
# among combined short options), a sed script that only prints, and nothing redirected into a
# file. Anything else (running code or tests, installs, `sed -i`, heredocs,
# command substitution, a line that does not parse) is `unknown`: coder mode never refuses an
# unknown-effect call as a duplicate, so every doubt leans toward "keep going". In a persistent
# shell (one session for the whole run, as in OpenHands and SWE-agent) `cd` changes what later
# commands see, so there a command with a `cd` is `unknown` too; mini-swe-agent runs every
# command in a fresh shell, where `cd` only matters inside the command.

from __future__ import annotations

import shlex

from stallwatch.contract.events import Effect

# Programs that read files or print state and never change the workspace (with the
# exceptions in _WRITING_OPTIONS). Declaring a writer here would let a re-run after its
# own change be refused as a duplicate, so the list stays short and plain.
# Programs that can write through their own arguments alone (awk's `print > f` and
# `system()`, `uniq in out`, `xxd in out`) are left out.
READ_ONLY = frozenset(
    {
        "cat",
        "ls",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "find",
        "head",
        "tail",
        "sed",
        "nl",
        "wc",
        "pwd",
        "echo",
        "printf",
        "tree",
        "file",
        "stat",
        "which",
        "type",
        "du",
        "diff",
        "cmp",
        "sort",
        "cut",
        "tr",
        "column",
        "realpath",
        "dirname",
        "basename",
        "printenv",
        "true",
        "cd",
        "od",
        "hexdump",
        "jq",
        "test",
        "[",
        "git",
        "xargs",
    }
)
# Options that make an otherwise reading program write (in place edits, find's actions, an
# output file): such a call is `unknown`.
_WRITING_OPTIONS = {
    "sed": ("-i", "--in-place"),
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprintf", "-fls"),
    "sort": ("-o", "--output"),
    "tree": ("-o",),
    "git": ("--output",),
}
# The same options as a letter among combined short options (`sed -Ei`, `sort -uo f`).
_WRITING_LETTERS = {"sed": "i", "sort": "o", "tree": "o"}
# A sed script that only prints: line addresses with p, q, = or l (`10,20p`, `$p`, `5q`), a
# regular expression address with one of them (`/error/p`), or a substitution without the
# flags that write or run (`w`, `e`); anything else (`w file`, `e cmd`, `r`) is `unknown`.
# Read by a scanner, one pass over the script (see _sed_prints).
_SED_COMMANDS = frozenset("pq=l")
_SED_FLAGS = frozenset("gIp0123456789")
# Longer commands are `unknown` unread: the lexer costs about a microsecond a character, and a
# reading command is a line, not a page.
MAX_COMMAND_CHARS = 8 * 1024
# git subcommands that only read the repository.
_GIT_READS = frozenset(
    {
        "diff",
        "status",
        "log",
        "show",
        "grep",
        "blame",
        "ls-files",
        "rev-parse",
        "shortlog",
        "describe",
        "cat-file",
        "ls-tree",
    }
)
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})
# Redirection targets that write nothing to the workspace.
_HARMLESS_TARGETS = frozenset({"/dev/null", "&1", "&2", "1", "2"})


def shell_effect(command: str, persistent: bool = False) -> Effect:
    """`read` when the whole command only reads (see the module docstring), else `unknown`.
    `persistent`: the shell session outlives the command, so a `cd` changes the session."""
    if len(command) > MAX_COMMAND_CHARS or "$(" in command or "`" in command or "<<" in command:
        return "unknown"
    try:
        lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: cannot tell
        return "unknown"
    if persistent and "cd" in tokens:
        return "unknown"
    segment: list[str] = []
    for i, token in enumerate(tokens):
        if token in _SEPARATORS:
            if not _reads(segment):
                return "unknown"
            segment = []
        elif token.startswith(">") or token in ("&>", "&>>"):
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            if target not in _HARMLESS_TARGETS and not (token == ">&" and target.isdigit()):
                return "unknown"
            segment.append("\x00")  # marks the redirection so its target is not an argument
        else:
            segment.append(token)
    return "read" if _reads(segment) else "unknown"


def _reads(words: list[str]) -> bool:
    """One simple command: a reading program with no writing option. Empty parts read."""
    words = [w for w in words if w != "\x00"]
    while words and "=" in words[0] and not words[0].startswith("="):
        words = words[1:]  # VAR=value prefixes
    if not words:
        return True
    program, args = words[0].rsplit("/", 1)[-1], words[1:]
    if program not in READ_ONLY:
        return False
    writing = _WRITING_OPTIONS.get(program, ())
    if any(a == opt or a.startswith(opt) for a in args for opt in writing):
        return False
    letter = _WRITING_LETTERS.get(program)
    if letter and any(a.startswith("-") and not a.startswith("--") and letter in a[1:] for a in args):
        return False
    if program == "git":
        sub = next((a for a in args if not a.startswith("-")), "")
        return sub in _GIT_READS
    if program == "xargs":
        rest = [a for a in args if not a.startswith("-")]
        return bool(rest) and _reads(rest)
    return program != "sed" or _sed_prints(args)


def _sed_prints(args: list[str]) -> bool:
    """Every script of a sed command only prints (`-e SCRIPT`, else its first operand)."""
    scripts = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-e", "--expression")]
    if not scripts:
        operands = [a for a in args if not a.startswith("-")]
        scripts = operands[:1]
    return all(_prints_only(script) for script in scripts)


def _prints_only(script: str) -> bool:
    """One sed script that only prints (see _SED_COMMANDS), read left to right once."""
    if script[:1] == "/":
        end = script.find("/", 1)
        return end > 0 and script[end + 1 :].lstrip() in _SED_COMMANDS
    if script[:1] == "s" and len(script) > 1:
        delimiter = script[1]
        if delimiter.isalnum() or delimiter == "_" or delimiter.isspace() or delimiter == "\\":
            return False
        parts = script[2:].split(delimiter)
        return (
            len(parts) == 3
            and "\n" not in parts[0]
            and "\n" not in parts[1]
            and all(flag in _SED_FLAGS for flag in parts[2])
        )
    return _addresses_only(script)


def _addresses_only(script: str) -> bool:
    """Line addresses and print commands: `[N|$][,N|$] [p|q|=|l] [;]`, any number of times,
    spaces between."""
    at, end = 0, len(script)

    def spaces(i: int) -> int:
        while i < end and script[i].isspace():
            i += 1
        return i

    def address(i: int) -> int:
        if i < end and script[i] == "$":
            return i + 1
        while i < end and script[i].isdecimal():
            i += 1
        return i

    while at < end:
        start = at
        at = address(spaces(at))
        if at < end and script[at] == ",":
            after = address(at + 1)
            at = after if after > at + 1 else at
        at = spaces(at)
        if at < end and script[at] in _SED_COMMANDS:
            at = spaces(at + 1)
        if at < end and script[at] == ";":
            at += 1
        if at == start:
            return False
    return True
