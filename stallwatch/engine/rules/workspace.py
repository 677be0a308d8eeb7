"""Coder mode's record of the workspace: call effects, the workspace version, what each call
signature returned.

Pure functions over a RunState; coder mode's rules (`rules/coder.py`) turn their answers into
verdicts, nudges and stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import re2
from xxhash import xxh3_128_digest, xxh3_128_hexdigest

from stallwatch.contract.events import FAILED_STATUSES, RawEvent
from stallwatch.engine.canonical import canonical_bytes, parse_json_text
from stallwatch.engine.state import RunState

# Call signatures whose history a run keeps, oldest forgotten first. Forgetting only makes a
# call look new (never a repeat, a stall or a failure streak), so a run making thousands of
# distinct calls cannot grow its state without bound.
MAX_CALL_HISTORY = 512
# Calls allowed and awaiting their result; beyond this the oldest is dropped (a result that
# never came must not hold memory; a dropped call's late result counts as new). 64, far above
# one response's parallel calls, keeps a state with every cap reached under MAX_RECORD_BYTES.
MAX_OPEN_CALLS = 64
# Characters of a call's label in words for the model: enough to recognise a command.
LABEL_CHARS = 80
# What of a command is read to make its label: spaces collapsed within the first _SPACED_CHARS,
# secrets masked within the first _MASKED_CHARS of that.
_SPACED_CHARS = 4096
_MASKED_CHARS = 4 * LABEL_CHARS
# Argument names that hold the command itself, so the model reads `pytest -x` rather than JSON.
_COMMAND_KEYS = ("command", "cmd", "code", "script", "query")


@dataclass(slots=True)
class Judged:
    """What one result of a known call means in coder mode."""

    new_fact: bool
    label: str  # the call, as the model would recognise it
    stall_runs: int  # runs in a row with this result and changes between; 0 unless it just grew
    failures: int  # failures in a row of this call with nothing else changing the workspace


def effect_of(state: RunState, event: RawEvent) -> str:
    """The call's own effect, else its tool's, else `unknown` (treated as a change)."""
    return event.get("effect") or state.tool_effects.get(event["tool"], "unknown")


def is_duplicate(state: RunState, signature: bytes | None, effect: str, exempt: bool) -> bool:
    """Coder duplicates: a read whose signature already ran as a read at this workspace version."""
    return effect == "read" and not exempt and signature is not None and signature in state.signatures


def allow(state: RunState, event: RawEvent, signature: bytes | None, effect: str) -> None:
    """An allowed call: remember it until its result; a call that is not a read advances the
    workspace version (the runtime runs it next), after which every earlier read may differ."""
    version = state.workspace_version
    if effect == "read":
        if signature is not None:
            state.add_signature(signature)
    else:
        state.workspace_version += 1
        if state.signatures:
            state.signatures = {}
    calls = state.open_calls
    calls[event["call_id"]] = [
        signature.hex() if signature is not None else None,
        effect,
        version,
        call_label(event["tool"], event.get("args")),
    ]
    if len(calls) > MAX_OPEN_CALLS:
        del calls[next(iter(calls))]


def on_result(
    state: RunState,
    event: RawEvent,
    whole: bytes | None,
    facts: list[bytes] | None,
    itemised: bool,
    always_new: bool,
    empty: bool,
) -> Judged | None:
    """Record a result. `whole`: the result's digest (None without content); `facts`: its fact
    digests (None when it counts as new whatever was seen: empty, no content); `itemised`: the
    facts are a declared list's items (kept per tool) rather than the whole result (kept per
    call signature); `empty`: the result holds nothing (a command that printed nothing).
    None for a result of a call this run does not know (it counts as new)."""
    call = state.open_calls.pop(event["call_id"], None)
    if call is None:
        return None
    sig_hex, effect, version, label = call
    past = state.call_history.pop(sig_hex, None) if sig_hex is not None else None
    new = _record_facts(state, sig_hex, facts, itemised)
    # A write or an unknown call never run before brings a fact whatever it answers: what it did.
    new = new or always_new or sig_hex is None or (effect != "read" and past is None)
    if sig_hex is None:
        return Judged(new, label, 0, 0)
    changed = past is not None and version != past[2]  # another call changed the workspace
    outcome = None if whole is None else xxh3_128_hexdigest(event["status"].encode() + b"\x00" + whole)
    entry = past or [None, 0, version, 0]
    stall_runs = 0
    if outcome is None or always_new or empty or effect == "write":
        # Never a stall: no content; new by declaration (a wait); a command that printed
        # nothing, which shows nothing a change could have changed; a write, whose answer
        # reports the write ("File created") or its rejection, not what the workspace does.
        entry[1] = 0
    elif past is None or outcome != past[0]:
        entry[1] = 1
    elif changed:  # the same result again after changes: a stall grows
        entry[1] += 1
        stall_runs = entry[1]
    # The same result with nothing changed between is a plain repeat: the stall neither grows
    # nor starts over (the new-fact streak and the failure count see repeats).
    entry[0] = outcome
    if event["status"] in FAILED_STATUSES:
        entry[3] = (0 if changed or past is None else entry[3]) + 1
    else:
        entry[3] = 0
    entry[2] = version + (effect != "read")
    history = state.call_history
    history[sig_hex] = entry
    if len(history) > MAX_CALL_HISTORY:
        del history[next(iter(history))]
    return Judged(new, label, stall_runs, entry[3])


def _record_facts(state: RunState, sig_hex: str | None, facts: list[bytes] | None, itemised: bool) -> bool:
    """True when a digest was not held yet. A whole result is held under its call's signature:
    the same text from another command is another fact."""
    if facts is None or sig_hex is None:
        return True
    if not itemised:
        facts = [xxh3_128_digest(bytes.fromhex(sig_hex) + facts[0])]
    new = False
    for digest in facts:
        if state.add_fingerprint(digest):
            new = True
    return new


def call_label(tool: str, args: Any) -> str:
    """The call as the model wrote it, short: the command for a shell, else tool and arguments."""
    args = parse_json_text(args) if type(args) is str else args
    if type(args) is str:
        text = args
    elif type(args) is dict:
        strings = [k for k, v in args.items() if type(v) is str]
        # A shell's command alone (`{"command": "ls", "timeout": 30}`); an editor's
        # `{"command": "create", "path": ...}` names its call only with all its arguments.
        if len(strings) == 1 and strings[0] in _COMMAND_KEYS:
            text = args[strings[0]]
        else:
            try:
                text = f"{tool} {canonical_bytes(args).decode()}"
            except ValueError:
                text = tool
    else:
        text = tool
    # Cut before matching: the label shows LABEL_CHARS, and a secret that starts within them is
    # masked whole within _MASKED_CHARS, so no command's length sets the cost.
    text = without_secrets(" ".join(text[:_SPACED_CHARS].split())[:_MASKED_CHARS])
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 3] + "..."


# What in a command line is likely a secret: a label goes to the commands topic (which every
# runtime of the deployment reads), the changelog and operators' terminals, so it keeps the
# command's shape and drops these (`mysql -uroot -psecret` stays `mysql -uroot -p***`). RE2, so
# matching is linear; the captured context (a preceding space, an option) is written back.
_SECRETS = tuple(
    (re2.compile(pattern), replacement)
    for pattern, replacement in (
        # credentials in a header or a URL
        (r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}", r"\1 ***"),
        (r"://[^/\s:@]+:[^/\s@]+@", "://***@"),
        (r"(\s)(-u|--user)\s+[^\s:]+:\S+", r"\1\2 ***"),
        # cookies, in a header or curl's own options
        (r"(?i)\b((?:set-)?cookie:\s*)[^\s\"';]+(?:;\s*[^\s\"';]+)*;?", r"\1***"),
        (r"(\s)(-b|--cookie)\s+\S+", r"\1\2 ***"),
        # a password given to a program's own option with a space: sshpass, docker login, redis-cli
        (r"(\bsshpass(?:\s+-[a-oq-z]\S*)*\s+-p)\s*\S+", r"\1 ***"),
        (r"(?i)(\blogin\b[^|;&\n]*\s(?:-p|--password))\s+[^\s-]\S*", r"\1 ***"),
        (r"(\bredis-cli\b[^|;&\n]*\s-a)\s+\S+", r"\1 ***"),
        (r"(?i)(\baws\s+configure\s+set\s+\S*(?:secret|key|token)\S*)\s+\S+", r"\1 ***"),
        # a password glued to its short option, as mysql and others take it
        (r"(\s)-p[^\s-]\S*", r"\1-p***"),
        # key=value and key: value of a secret-named key (password=, --token=, api_key:, PGPASSWORD=)
        (
            r"(?i)((?:pass(?:word|wd)?|pwd|token|secret|api[-_]?key|access[-_]?key|auth)\w*"
            r"(?:=|:\s*))[^\s&]+",
            r"\1***",
        ),
        # an option naming a secret, then its value (`--password hunter2`, `--token abc`)
        (r"(?i)(--?(?:pass(?:word)?|token|secret|api[-_]?key)\s+)[^-\s]\S*", r"\1***"),
        # well-known key shapes (OpenAI, Anthropic, GitHub, GitLab, Slack, AWS, Google, Hugging
        # Face, npm, Stripe)
        (
            r"\b(?:sk-(?:ant-)?|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|xox[abpr]-|AKIA|AIza|hf_|npm_"
            r"|sk_live_|rk_live_)[A-Za-z0-9_-]{8,}",
            "***",
        ),
    )
)


def without_secrets(text: str) -> str:
    """The text with what looks like a secret replaced by `***` (see _SECRETS)."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text
