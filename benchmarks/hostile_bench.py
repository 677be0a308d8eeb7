"""Per-event CPU of the most hostile declarations we can build, beside the same event undeclared.

    python benchmarks/hostile_bench.py

Each case is one run whose `run_started` declares the case's tool, then one call and its result
near the broker's largest message (1 MiB). The figure is the CPU time of applying that one
result (parse, mask, strip, fingerprint, rules), the median of five, beside the baseline: the same
result to a tool that declares nothing. The bound the engine keeps (docs/decisions.md, "Bounded
work per event") is linear in the event's size; the last column is each case's cost per KiB.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stallwatch.contract.parse import MAX_EVENT_BYTES
from stallwatch.engine.embedded import EmbeddedEngine, Rejected

# Room for the envelope around the result.
RESULT_BYTES = MAX_EVENT_BYTES - 2_000


def text_result(alphabet: str, seed: int = 1) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(RESULT_BYTES - 4))


def nested_result(keys: list[str], leaf: Any) -> dict:
    """A tree of dicts with the given keys at every level (a list every fourth level), a subtree
    a quarter of the result or less, then as many top-level copies of it as fit."""
    value: Any = leaf
    level = 1
    while len(orjson.dumps({k: value for k in keys})) < RESULT_BYTES // 4:
        value = {k: value for k in keys} if level % 4 else [value, value]
        level += 1
    out: dict[str, Any] = {}
    size = len(orjson.dumps(value)) + 12
    for n in range(RESULT_BYTES // size):
        out[keys[n] if n < len(keys) else f"{keys[n % len(keys)]}{n}"] = value
    return out


def fact_items() -> dict:
    items = []
    while len(orjson.dumps(items)) < RESULT_BYTES - 200:
        items.append({"doc": {"id": len(items)}, "score": 0.5, "text": "x" * 20})
    return {"hits": {"items": items}}


ADVERSARIAL_PATHS = [".".join("*" if (n >> i) & 1 else "a" for i in range(6)) for n in range(64)]
CASES: list[tuple[str, dict, Any]] = [
    ("catastrophic on re: (a+)+$", {"volatile_patterns": ["(a+)+$"]}, "a" * (RESULT_BYTES - 5) + "!"),
    ("DFA blow-up: [ab]*a[ab]{20}", {"volatile_patterns": ["[ab]*a[ab]{20}"]}, text_result("ab")),
    (
        "32 DFA blow-ups joined",
        {"volatile_patterns": [f"[ab]*a[ab]{{{n}}}" for n in range(8, 40)]},
        text_result("ab"),
    ),
    (
        "32 patterns of 500 characters",
        {
            "volatile_patterns": [
                "(?:" + "|".join(f"w{n}x{m}" for m in range(60))[:494] + ")" for n in range(32)
            ]
        },
        text_result("wx0123456789"),
    ),
    (
        "64 paths *.*.*.zN",
        {"volatile_fields": [f"*.*.*.z{n}" for n in range(64)]},
        nested_result([f"k{n}" for n in range(12)], {"z1": 1, "keep": "v"}),
    ),
    (
        "64 paths, every one active",
        {"volatile_fields": ADVERSARIAL_PATHS},
        nested_result(["a", "b"], {"a": 1, "b": 2}),
    ),
    ("facts: 15k items by key", {"facts": {"path": "hits.items", "key": "doc.id"}}, fact_items()),
    (
        "paths, patterns and facts",
        {
            "volatile_fields": ADVERSARIAL_PATHS,
            "volatile_patterns": [f"[ab]*a[ab]{{{n}}}" for n in range(8, 40)],
            "facts": {"path": "a", "key": "a"},
        },
        nested_result(["a", "b"], "ab" * 40),
    ),
]


def lines_of(declaration: dict, result: Any) -> tuple[list[bytes], bytes]:
    envelope = {"v": 1, "run_id": "bench", "ts": 1.0}
    start = {
        **envelope,
        "type": "run_started",
        "event_id": "e0",
        "mode": "researcher",
        "tools": [{"name": "search", **declaration}],
    }
    call = {
        **envelope,
        "type": "call_proposed",
        "event_id": "e1",
        "round": 1,
        "call_id": "c1",
        "tool": "search",
        "args": {"q": 1},
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


def cost(declaration: dict, result: Any, repeats: int = 5) -> tuple[float, int]:
    before, line = lines_of(declaration, result)
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
    print(
        f"{'case':34} {'event KiB':>9} {'declared ms':>11} {'baseline ms':>11} {'x baseline':>10} "
        f"{'µs/KiB':>7}"
    )
    for name, declaration, result in CASES:
        declared, size = cost(declaration, result)
        baseline, _ = cost({}, result)
        print(
            f"{name:34} {size / 1024:9.0f} {declared * 1e3:11.1f} {baseline * 1e3:11.1f} "
            f"{declared / baseline:10.1f} {declared * 1e6 / (size / 1024):7.1f}"
        )


if __name__ == "__main__":
    main()
