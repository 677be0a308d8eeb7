"""Per-event CPU of the most hostile declarations and inputs we can build, beside the same event
with nothing declared, at 1 KiB, 64 KiB and 1 MiB.

    python benchmarks/hostile_bench.py

Each case is one run whose `run_started` declares the case's tool, then one call and its result
of about the given size. The figure is the CPU time (`time.process_time`) of applying that one
result (parse, mask, strip, fingerprint, rules, a coder label), the median of five, beside the
baseline: the same call and result to a tool that declares nothing, in researcher mode. The bound
the engine keeps is stated in docs/contract.md ("Work per event"); the target is at most 10x the
baseline and at most 100 ms for the worst event of 1 MiB. Declarations the contract refuses (a
pattern set over its program size) are listed apart, with the refusal.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch.contract.parse import MAX_EVENT_BYTES
from stallwatch.contract.patterns import MAX_PROGRAM_SIZE, PatternError, compile_declared
from stallwatch.engine.embedded import EmbeddedEngine, Rejected

SIZES = (1024, 64 * 1024, MAX_EVENT_BYTES)
# Room for the envelope around the result.
ENVELOPE_BYTES = 2_000


def text_result(alphabet: str, size: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(max(16, size - ENVELOPE_BYTES)))


def nested_result(keys: list[str], leaf: Any, size: int) -> dict:
    """A tree of dicts with the given keys at every level (a list every fourth level), a subtree
    a quarter of the result or less, then as many top-level copies of it as fit."""
    budget = max(256, size - ENVELOPE_BYTES)
    value: Any = leaf
    level = 1
    while len(orjson.dumps({k: value for k in keys})) < budget // 4:
        value = {k: value for k in keys} if level % 4 else [value, value]
        level += 1
    out: dict[str, Any] = {}
    each = len(orjson.dumps(value)) + 12
    for n in range(max(1, budget // each)):
        out[keys[n] if n < len(keys) else f"{keys[n % len(keys)]}{n}"] = value
    return out


def fact_items(size: int) -> dict:
    items: list[dict] = []
    while len(orjson.dumps(items)) < size - ENVELOPE_BYTES - 200:
        items.append({"doc": {"id": len(items)}, "score": 0.5, "text": "x" * 20})
    return {"hits": {"items": items}}


def many_strings(text: str, size: int) -> list[str]:
    return [text] * max(1, (size - ENVELOPE_BYTES) // (len(text) + 3))


ADVERSARIAL_PATHS = [".".join("*" if (n >> i) & 1 else "a" for i in range(6)) for n in range(64)]
# Alternations of counted repetitions, the largest such set under MAX_PROGRAM_SIZE: its automaton
# outgrows RE2's memory on text of a and b, so RE2 takes its slow path.
SLOW_PATH = [f"a[ab]{{{10 + i}}}b[ab]{{1,{12 + i}}}c" for i in range(16)]
# The same kind at the contract's limits (32 patterns of ~100 characters): refused when declared.
REFUSED = {
    "32 x 100 chars of counted repetitions": [
        "(?:"
        + "|".join(f"a[ab]{{{10 + (n + i) % 9}}}b[ab]{{1,{12 + (n * 3 + i) % 13}}}c" for i in range(5))
        + ")"
        for n in range(32)
    ],
    "32 patterns of 500 characters": [
        "(?:" + "|".join(f"w{n}x{m}" for m in range(60))[:494] + ")" for n in range(32)
    ],
}
Case = tuple[str, str, dict, Callable[[int], Any]]
CASES: list[Case] = [
    (
        "catastrophic on re: (a+)+$",
        "researcher",
        {"volatile_patterns": ["(a+)+$"]},
        lambda n: "a" * (n - ENVELOPE_BYTES) + "!",
    ),
    (
        "DFA blow-up: [ab]*a[ab]{20}",
        "researcher",
        {"volatile_patterns": ["[ab]*a[ab]{20}"]},
        lambda n: text_result("ab", n),
    ),
    (
        "32 DFA blow-ups joined",
        "researcher",
        {"volatile_patterns": [f"[ab]*a[ab]{{{n}}}" for n in range(8, 40)]},
        lambda n: text_result("ab", n),
    ),
    (
        f"RE2 slow path, {MAX_PROGRAM_SIZE} instr.",
        "researcher",
        {"volatile_patterns": SLOW_PATH},
        lambda n: text_result("ab", n),
    ),
    (
        "slow path, 64-char strings",
        "researcher",
        {"volatile_patterns": SLOW_PATH},
        lambda n: many_strings(text_result("ab", 66), n),
    ),
    ("coder defaults, durations", "coder", {}, lambda n: text_result("0123456789 ms.", n)),
    ("coder defaults, 1-char strings", "coder", {}, lambda n: many_strings("1s", n)),
    (
        "64 paths *.*.*.zN",
        "researcher",
        {"volatile_fields": [f"*.*.*.z{n}" for n in range(64)]},
        lambda n: nested_result([f"k{i}" for i in range(12)], {"z1": 1, "keep": "v"}, n),
    ),
    (
        "64 paths, every one active",
        "researcher",
        {"volatile_fields": ADVERSARIAL_PATHS},
        lambda n: nested_result(["a", "b"], {"a": 1, "b": 2}, n),
    ),
    ("facts: items by key", "researcher", {"facts": {"path": "hits.items", "key": "doc.id"}}, fact_items),
    (
        "paths, patterns and facts",
        "researcher",
        {
            "volatile_fields": ADVERSARIAL_PATHS,
            "volatile_patterns": SLOW_PATH,
            "facts": {"path": "a", "key": "a"},
        },
        lambda n: nested_result(["a", "b"], "ab" * 40, n),
    ),
]


def lines_of(
    declaration: dict, result: Any, mode: str = "researcher", args: Any = None
) -> tuple[list[bytes], bytes]:
    envelope = {"v": 1, "run_id": "bench", "ts": 1.0}
    start = {
        **envelope,
        "type": "run_started",
        "event_id": "e0",
        "mode": mode,
        "tools": [{"name": "search", **declaration}],
    }
    call = {
        **envelope,
        "type": "call_proposed",
        "event_id": "e1",
        "round": 1,
        "call_id": "c1",
        "tool": "search",
        "args": {"q": 1} if args is None else args,
    }
    answer = {
        **envelope,
        "type": "call_result",
        "event_id": "e2",
        "round": 1,
        "call_id": "c1",
        "tool": "search",
        "status": "ok",
        "result": result,
    }
    return [orjson.dumps(start), orjson.dumps(call)], orjson.dumps(answer)


def cost(declaration: dict, result: Any, mode: str = "researcher", repeats: int = 5) -> tuple[float, int]:
    # The call's arguments are as long as its result: a coder label reads them too.
    args = {"command": "pass" * (len(orjson.dumps(result)) // 8)} if mode == "coder" else None
    before, line = lines_of(declaration, result, mode, args)
    times = []
    for _ in range(repeats):
        fleet = EmbeddedEngine()
        for raw in before:
            assert not isinstance(fleet.handle_raw(raw), Rejected), "the declaration was refused"
        started = time.process_time()
        outcome = fleet.handle_raw(line)
        times.append(time.process_time() - started)
        assert not isinstance(outcome, Rejected), outcome.letter.error
    return statistics.median(times), len(line)


def main() -> None:
    print("Refused when declared:")
    for name, patterns in REFUSED.items():
        try:
            compile_declared(tuple(patterns))
            print(f"  {name}: ACCEPTED")
        except PatternError as exc:
            print(f"  {name}: {str(exc)[:100]}")
    print(
        f"{'case':34} {'event KiB':>9} {'declared ms':>11} {'baseline ms':>11} {'x baseline':>10} "
        f"{'µs/KiB':>7}"
    )
    worst: dict[int, tuple[float, float, str]] = {}
    for name, mode, declaration, make in CASES:
        for size in SIZES:
            result = make(size)
            declared, length = cost(declaration, result, mode)
            baseline, _ = cost({}, result)
            print(
                f"{name:34} {length / 1024:9.0f} {declared * 1e3:11.2f} {baseline * 1e3:11.2f} "
                f"{declared / baseline:10.1f} {declared * 1e6 / (length / 1024):7.1f}"
            )
            if declared > worst.get(size, (0.0, 0.0, ""))[0]:
                worst[size] = (declared, baseline, name)
    for size, (declared, baseline, name) in sorted(worst.items()):
        print(
            f"worst at {size // 1024} KiB: {declared * 1e3:.1f} ms ({name}), "
            f"{declared / baseline:.1f}x its baseline of {baseline * 1e3:.1f} ms"
        )


if __name__ == "__main__":
    main()
