"""A fuzz harness over everything a runtime can send: events of every type with fields valid and
not, declarations built to make the engine work hard, results of any JSON up to the size limits,
deep nesting and odd Unicode, raw bytes. Replay and the worker's batch step never raise, answer
alike, and no event costs more than the bound stated in docs/decisions.md ("Bounded work per
event").

`make test` runs a fixed number of examples (the `ci` profile); `make fuzz` runs many more
(HYPOTHESIS_PROFILE=fuzz)."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import time
from collections.abc import Iterator

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stallwatch.contract.commands import encode_command
from stallwatch.contract.events import EVENT_TYPES
from stallwatch.contract.parse import MAX_EVENT_BYTES
from stallwatch.engine.detector import Detector
from stallwatch.engine.embedded import EmbeddedEngine, Rejected
from stallwatch.engine.expiry import PartitionClock
from stallwatch.engine.names import LABEL_CHARS, plain
from stallwatch.engine.shell import shell_effect
from stallwatch.engine.state import RunState
from stallwatch_streams.worker.batch import BatchApplier, SourceMessage

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
settings.register_profile("fuzz", max_examples=5_000, deadline=None, suppress_health_check=list(HealthCheck))
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)
# Adversarial logs are up to 1 MiB an event: fewer of them at a fixed budget.
ADVERSARIAL_EXAMPLES = 12 if PROFILE == "ci" else 1_000

# The bound per event, in CPU seconds: a fixed part and a part per byte of the event. docs/contract.md
# states 10 ms + 0.1 µs a byte; this allows 0.25 s fixed and four times the part per byte (a loaded
# machine), still far below the seconds to minutes the attacks it excludes took. Measured worst
# cases: benchmarks/hostile_bench.py. The cyclic collector is held off while a step is timed: its
# pauses scan the whole test process's heap (hypothesis's data among it), not the event's work.
FIXED_S = 0.25
PER_BYTE_S = 4 * 0.1e-6

RUNS = ["r1", "r2", "r3"]
TOOLS = ["search", "fetch", "bash", "wait", "t" * 200]

odd_text = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["", "\u202e\u2066bidi", "\x1b[31mred", "line\nbreak", "\u0000nul", "é" * 50, "a" * 300]
)
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | odd_text
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.dictionaries(odd_text | st.sampled_from(["z1", "id", "items", "0"]), inner, max_size=6)
    ),
    max_leaves=40,
)
segments = st.sampled_from(["*", "items", "id", "0", "1", "z1", "a", "", "²", "007"])
paths = st.lists(segments, min_size=1, max_size=5).map(".".join)
patterns = st.sampled_from(
    [
        "\\d+ms",
        "(?i)token",
        "(?P<t>a)",
        "(a+)+$",
        "[ab]*a[ab]{12}",
        "(",
        "(?<=x)y",
        "a{1001}",
        "\\pL{1000}",
        "x*",
        "",
        "(a)\\1",
        "[[:alpha:]]+",
    ]
)
tool_specs = st.fixed_dictionaries(
    {"name": st.sampled_from(TOOLS) | odd_text},
    optional={
        "repeat_exempt": st.booleans() | scalars,
        "volatile_fields": st.lists(paths, max_size=70),
        "volatile_patterns": st.none() | st.lists(patterns, max_size=34),
        "facts": st.fixed_dictionaries({"path": paths}, optional={"key": st.none() | paths}) | scalars,
        "effect": st.sampled_from(["read", "write", "unknown", "bogus"]),
    },
)
policies = st.dictionaries(
    st.sampled_from(
        ["max_rounds", "call_budget", "nudge_at", "fleet_breaker", "cycle_threshold", "time_limit_s", "bogus"]
    ),
    st.none() | st.integers(-1, 50) | st.booleans() | st.floats(0, 100),
    max_size=3,
)


def event(kind: str, run: str, n: int, extra: dict) -> dict:
    return {"v": 1, "type": kind, "event_id": f"{run}-{n}", "run_id": run, "ts": 1000.0 + n, **extra}


@st.composite
def events(draw: st.DrawFn, n: int) -> bytes:
    run = draw(st.sampled_from(RUNS))
    kind = draw(st.sampled_from([*EVENT_TYPES, "call_proposed", "call_result", "junk"]))
    round_no = draw(st.integers(0, 8) | st.sampled_from([-1, 2**63]))
    call = {
        "round": round_no,
        "call_id": draw(st.sampled_from(["c1", "c2", "c3"]) | odd_text),
        "tool": draw(st.sampled_from(TOOLS) | odd_text),
    }
    extra: dict = {
        "run_started": lambda: {
            "mode": draw(st.sampled_from(["researcher", "chat", "coder", "x"])),
            "tools": draw(st.lists(tool_specs, max_size=4)),
            "policy": draw(policies),
            "tenant": draw(st.none() | odd_text),
        },
        "call_proposed": lambda: {**call, "args": draw(json_values)},
        "call_result": lambda: {
            **call,
            "status": draw(st.sampled_from(["ok", "error", "overloaded", "?"])),
            "result": draw(json_values),
        },
        "round_started": lambda: {"round": round_no},
        "round_ended": lambda: {"round": round_no},
        "run_ended": lambda: {"reason": draw(st.none() | odd_text)},
        "fleet_advisory": lambda: {
            "incident_id": "i1",
            "incident": draw(st.sampled_from(["open", "closed"])),
            "kind": "tool_failing",
            "tool": call["tool"],
            "window_s": 60.0,
        },
    }.get(kind, dict)()
    raw = _dumps(event(kind, run, n, extra))
    mangle = draw(st.sampled_from(["none"] * 8 + ["cut", "deep", "bytes", "big"]))
    if mangle == "cut":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif mangle == "deep":
        depth = draw(st.integers(250, 1100))
        raw = raw[:-1] + b',"result":' + b"[" * depth + b"]" * depth + b"}"
    elif mangle == "bytes":
        raw = draw(st.binary(max_size=64))
    elif mangle == "big":  # near the broker's limit, strings the patterns scan
        raw = raw[:-1] + b',"result":{"items":[{"id":1,"z1":"' + b"a" * 200_000 + b'!"}]}}'
    return raw


@st.composite
def logs(draw: st.DrawFn) -> list[bytes]:
    count = draw(st.integers(1, 30))
    lines = []
    for run in RUNS:  # most logs start their runs, so that later events meet a state
        if draw(st.booleans()):
            tools = draw(st.lists(tool_specs, max_size=3))
            lines.append(
                _dumps(
                    event(
                        "run_started",
                        run,
                        -1,
                        {"mode": draw(st.sampled_from(["researcher", "chat", "coder"])), "tools": tools},
                    )
                )
            )
    return lines + [draw(events(n)) for n in range(count)]


@contextlib.contextmanager
def collector_held() -> Iterator[None]:
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def costed_replay(lines: list[bytes]) -> list[bytes]:
    """Replay's commands (dead letters as their errors), each line's CPU time within the bound."""
    out: list[bytes] = []
    results = EmbeddedEngine(shared_topic=True).replay(lines)  # read as the worker reads the shared topic
    for line in lines:
        with collector_held():
            started = time.process_time()
            result = next(results, None) if line.strip() else None
            elapsed = time.process_time() - started
        assert elapsed < FIXED_S + PER_BYTE_S * len(line), (elapsed, len(line), line[:200])
        if isinstance(result, Rejected):
            out.append(b"dead letter: " + result.letter.error.encode())
        elif result:
            out.extend(encode_command(c) for c in result)
    return out


@given(logs())
def test_replay_never_raises_and_no_event_costs_more_than_the_bound(lines):
    costed_replay(lines)


@given(logs(), st.integers(1, 5))
def test_the_batch_step_never_raises_and_answers_as_replay_does(lines, batch_size):
    expected = [c for c in costed_replay(lines) if not c.startswith(b"dead letter")]
    states: dict[str, RunState] = {}
    applier = BatchApplier(Detector(), "stallwatch.events")
    got: list[bytes] = []
    for start in range(0, len(lines), batch_size):
        batch = [
            SourceMessage(_key(line), line, 0, start + i)
            for i, line in enumerate(lines[start : start + batch_size])
        ]
        result = applier.apply(batch, states.get, PartitionClock(), 0.0)
        states = {
            run: RunState.from_bytes(state.to_bytes()) for run, state in {**states, **result.states}.items()
        }  # as the changelog keeps them
        got += [encode_command(c) for c in result.commands]
    assert got == expected


# -- adversarial inputs, one generator per step -------------------------------------------------

SIZES = [1024, 64 * 1024, MAX_EVENT_BYTES - 2_000]
# The largest accepted pattern set whose automaton outgrows RE2's memory on text of a and b.
SLOW_PATH = [f"a[ab]{{{10 + i}}}b[ab]{{1,{12 + i}}}c" for i in range(16)]
STAR_PATHS = [".".join("*" if (n >> i) & 1 else "a" for i in range(6)) for n in range(64)]


def text_of(alphabet: bytes, size: int, seed: int) -> str:
    """`size` characters drawn from `alphabet` (at most 256), fast at any size."""
    table = bytes(alphabet[i % len(alphabet)] for i in range(256))
    return random.Random(seed).randbytes(size).translate(table).decode()


def nested(keys: list[str], leaf: object, size: int) -> object:
    value = leaf
    while len(orjson.dumps(value)) * len(keys) < size:
        value = {k: value for k in keys}
    return value


@st.composite
def adversarial_log(draw: st.DrawFn) -> list[bytes]:
    """One run: a declaration built for one step, one call, and that step's worst result."""
    step = draw(
        st.sampled_from(["patterns", "strings", "defaults", "label", "paths", "facts", "canonical", "names"])
    )
    size = draw(st.sampled_from(SIZES))
    seed = draw(st.integers(0, 2**16))
    tool: dict = {"name": "hostile"}
    mode, args, result = "researcher", {"q": 1}, None
    if step == "patterns":  # one long string against the slow path
        tool["volatile_patterns"] = SLOW_PATH
        result = text_of(b"ab", size, seed)
    elif step == "strings":  # many short strings, each a call into RE2
        tool["volatile_patterns"] = draw(st.sampled_from([SLOW_PATH, ["\\d+ms"], ["x*"]]))
        result = [text_of(b"ab1ms", draw(st.integers(1, 200)), seed)] * (size // 100)
    elif step == "defaults":  # coder's default set against digits and units
        mode = "coder"
        result = text_of(b"0123456789 .msx:-T", size, seed)
    elif step == "label":  # a one-word command that secrets masking once scanned whole
        mode = "coder"
        word = draw(st.sampled_from(["pass", "-p", "token=", "Cookie: a=b;", "sshpass -e ", " "]))
        args = {"command": word * (size // len(word))}
        result = "ok"
    elif step == "paths":
        tool["volatile_fields"] = STAR_PATHS
        result = nested(["a", "b"], {"a": 1, "b": "x"}, size)
    elif step == "facts":
        tool["facts"] = {"path": "hits", "key": "doc.id"}
        result = {"hits": [{"doc": {"id": n}, "t": "x"} for n in range(size // 30)]}
    elif step == "canonical":  # wide and deep values, long keys
        result = draw(
            st.sampled_from(
                [
                    {text_of(b"abc", 40, n): n for n in range(size // 50)},
                    [[[[[n]]]] for n in range(size // 14)],
                    "[" * min(size // 2, 250) + "]" * min(size // 2, 250),
                ]
            )
        )
    else:  # names: escape sequences and hidden characters in the tool's name and the command
        mode = "coder"
        args = {"command": ("\x1b]8;;" + "\u202e" * 3) * (size // 12)}
        result = "ok"
    tool_name = tool["name"]
    lines = [
        event("run_started", "adv", 0, {"mode": mode, "tools": [tool]}),
        event("call_proposed", "adv", 1, {"round": 1, "call_id": "c1", "tool": tool_name, "args": args}),
        event(
            "call_result",
            "adv",
            2,
            {"round": 1, "call_id": "c1", "tool": tool_name, "status": "ok", "result": result},
        ),
    ]
    return [orjson.dumps(line)[:MAX_EVENT_BYTES] for line in lines]


@settings(max_examples=ADVERSARIAL_EXAMPLES)
@given(adversarial_log())
def test_each_steps_worst_input_stays_within_the_bound(lines):
    costed_replay(lines)


@settings(max_examples=ADVERSARIAL_EXAMPLES)
@given(
    st.sampled_from(["sed -n '{}x' f", "cat {}", "grep {} | head", "{}"]),
    st.sampled_from(["1", "a b ", "'", "$(", ";", "-i"]),
    st.sampled_from(SIZES),
)
def test_the_shell_rule_reads_any_command_within_the_bound(template, unit, size):
    command = template.format(unit * (size // len(unit)))
    with collector_held():
        started = time.process_time()
        shell_effect(command)
        shell_effect(command, persistent=True)
        elapsed = time.process_time() - started
    assert elapsed < FIXED_S + PER_BYTE_S * len(command)


@settings(max_examples=ADVERSARIAL_EXAMPLES)
@given(st.sampled_from(["\x1b]", "\x1b[", "\x9b1;", "\u202e", "`", " \n", "é"]), st.sampled_from(SIZES))
def test_names_are_made_safe_within_the_bound(unit, size):
    name = unit * (size // len(unit))
    with collector_held():
        started = time.process_time()
        plain(name, LABEL_CHARS)
        elapsed = time.process_time() - started
    assert elapsed < FIXED_S + PER_BYTE_S * len(name)


def _dumps(value: object) -> bytes:
    """JSON as any runtime may write it: the standard library's, which takes integers of any size
    (orjson refuses those past 64 bits) and non-ASCII text as is."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _key(line: bytes) -> bytes | None:
    """The record key a runtime gives an event: its run id, when there is one to read."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return b"garbage"
    run = value.get("run_id") if type(value) is dict else None
    return run.encode("utf-8", "surrogatepass") if type(run) is str else b"garbage"
