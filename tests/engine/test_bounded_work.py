"""Every event's work is bounded by construction: the attacks that each took seconds to minutes
of one process's CPU, each now refused when declared or cut to a small constant per byte of a
bounded input (docs/contract.md, "Work per event")."""

from __future__ import annotations

import random
import time

import orjson
import pytest

from stallwatch.contract.parse import MAX_EVENT_BYTES, InvalidEvent, parse_event
from stallwatch.contract.patterns import (
    DEFAULT_VOLATILE_PATTERNS,
    MASK,
    MASK_EVENT_BYTES,
    MAX_PROGRAM_SIZE,
    compile_declared,
    scan_budget,
)
from stallwatch.engine.canonical import declared_view
from stallwatch.engine.embedded import EmbeddedEngine, Rejected
from stallwatch.engine.masks import mask_strings
from stallwatch.engine.rules.workspace import call_label
from stallwatch.engine.shell import shell_effect
from tests.script import RunScript

# CPU a single step of one event may take in these tests: the benchmark measures the real
# figures (benchmarks/hostile_bench.py, a few ms to ~50 ms at 1 MiB); this leaves room for a
# loaded machine while failing far below the seconds to minutes the attacks took.
STEP_S = 0.5


def ab_text(size: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ab") for _ in range(size))


# 32 patterns of about 100 characters, alternations of counted repetitions: RE2 accepts each, but
# their automaton outgrows its memory on text of a and b, and its slow path cost 68 s at 990 KB.
SLOW_PATH = [
    "(?:"
    + "|".join(f"a[ab]{{{10 + (n + i) % 9}}}b[ab]{{1,{12 + (n * 3 + i) % 13}}}c" for i in range(5))
    + ")"
    for n in range(32)
]
# The largest set of the same kind the contract accepts.
SLOW_PATH_ALLOWED = [f"a[ab]{{{10 + i}}}b[ab]{{1,{12 + i}}}c" for i in range(16)]


def test_a_pattern_set_whose_program_is_too_large_refuses_its_run_started():
    assert all(len(p) <= 120 for p in SLOW_PATH)
    event = RunScript("r", tools=[{"name": "search", "volatile_patterns": SLOW_PATH}]).events[0]
    with pytest.raises(InvalidEvent) as caught:
        parse_event(orjson.dumps(event))
    assert "tools.0.volatile_patterns" in str(caught.value)
    assert f"more than {MAX_PROGRAM_SIZE}" in str(caught.value)


def test_the_largest_accepted_slow_path_set_costs_little_on_a_broker_sized_result():
    compiled = compile_declared(tuple(SLOW_PATH_ALLOWED))
    assert compiled.regex.programsize <= MAX_PROGRAM_SIZE
    for result in (ab_text(990_000), [ab_text(1_000, seed) for seed in range(900)]):
        started = time.process_time()
        declared_view("search", result, [], None, tuple(SLOW_PATH_ALLOWED))
        assert time.process_time() - started < STEP_S


def test_masking_stops_at_the_events_budget_and_keeps_the_rest_whole():
    patterns = ("\\d+ms",)
    budget = scan_budget(compile_declared(patterns).regex.programsize)
    assert budget <= MASK_EVENT_BYTES
    one = "took 12ms " * 100  # 1,000 bytes
    masked = mask_strings([one] * 200, patterns)
    changed = [s for s in masked if s != one]
    assert changed and all(MASK in s for s in changed)
    assert len(changed) < 200 and sum(len(one) for _ in changed) <= budget
    assert masked[len(changed) :] == [one] * (200 - len(changed)), "document order, then whole"
    # A string beyond the budget is fingerprinted whole: two differing only in volatile text
    # differ, so the result looks new (never a false repeat).
    big_a, big_b = "x 1ms " * 20_000, "x 2ms " * 20_000
    assert mask_strings(big_a, patterns) == big_a != mask_strings(big_b, patterns)


def test_matches_replaced_per_event_are_capped():
    masked = mask_strings("1ms " * 8_000, ("\\d+ms",))
    assert 0 < masked.count(MASK) <= 4096


def test_the_coder_defaults_mask_as_before():
    text = "Ran 3 tests in 0.004s at 2024-05-01T12:00:03.123Z <X at 0x7f3a2c1b9d60> /bin/bash: line 62215: x"
    assert mask_strings(text, DEFAULT_VOLATILE_PATTERNS) == (
        f"Ran 3 tests in {MASK} at {MASK} <X at {MASK}> /bin/bash: line {MASK}: x"
    )


def test_a_900_kb_one_word_command_labels_at_once():
    """Masking before cutting: 4 s at 40 KB, minutes at 900 KB."""
    command = "pass" * 225_000
    started = time.process_time()
    label = call_label("bash", {"command": command})
    assert time.process_time() - started < STEP_S
    assert label.endswith("...") and len(label) == 80


def test_the_same_command_through_the_engine_is_judged_at_once():
    engine = EmbeddedEngine()
    run = RunScript("coder-run", mode="coder")
    for raw in run.events:
        engine.handle_raw(orjson.dumps(raw))
    call = {
        "v": 1,
        "type": "call_proposed",
        "event_id": "e-big",
        "run_id": "coder-run",
        "ts": 2.0,
        "round": 1,
        "call_id": "c-big",
        "tool": "bash",
        "args": {"command": "pass" * ((MAX_EVENT_BYTES - 1_000) // 4)},
    }
    raw = orjson.dumps(call)
    assert len(raw) <= MAX_EVENT_BYTES
    started = time.process_time()
    outcome = engine.handle_raw(raw)
    assert time.process_time() - started < STEP_S
    assert not isinstance(outcome, Rejected)


@pytest.mark.parametrize("digits", [24, 30, 4_000])
def test_a_sed_script_of_digits_is_read_at_once(digits):
    """The nested optional quantifiers took 13.6 s at 24 digits, about 11 minutes at 30."""
    started = time.process_time()
    assert shell_effect(f"sed -n '{'1' * digits}x' f") == "unknown"
    assert shell_effect(f"sed -n '{'1' * digits}p' f") == "read"
    assert time.process_time() - started < STEP_S


def test_a_command_too_long_to_lex_cheaply_is_unknown():
    started = time.process_time()
    assert shell_effect("cat " + "a" * 900_000) == "unknown"
    assert shell_effect("cat " + "a b " * 200_000) == "unknown"
    assert time.process_time() - started < STEP_S
