"""Generate a synthetic fleet log: thousands of runs, a realistic mix of looping and healthy ones.

    python benchmarks/fleet_log.py [--runs 6000] [--out benchmarks/data/fleet.jsonl]

Runs overlap in time the way a fleet's do (a few hundred live at once), so the replay sees
interleaved runs as a worker would. Result sizes follow what research tools return: search
hits with a title, a URL and a snippet of about 40 words (~2 KB for six hits), pages fetched
as ~1.5 KB of extracted text; chat lookups and waits are a few dozen bytes. The mix:
  paging researcher   30%  new documents every round, ends on its own
  reworded researcher 25%  rewords one query; the same documents come back (stops: no_new_facts)
  duplicate researcher 10% repeats the very same call (refused; stops: all_refused)
  failing researcher   5%  a tool that errors (stops: tool_failures)
  lead                10%  waits on researchers with a repeat-exempt tool, then answers
  insisting chat      10%  asks the same thing again and again (refused: repeated_call)
  healthy chat        10%  a few different calls, then answers
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from pathlib import Path

import orjson

from stallwatch.contract.envelope import envelope

WORDS = (
    "kafka",
    "stream",
    "table",
    "changelog",
    "partition",
    "offset",
    "replica",
    "broker",
    "consumer",
    "producer",
    "agent",
    "loop",
    "tool",
    "search",
    "result",
    "fact",
    "round",
    "budget",
    "detector",
    "fleet",
)


def documents(rng: random.Random, seed: int, n: int) -> dict:
    """A search result of n hits whose content depends only on `seed`."""
    local = random.Random(seed)
    return {
        "total": n,
        "took_ms": 12,
        "documents": [
            {
                "id": f"doc-{seed}-{i}",
                "title": " ".join(local.choices(WORDS, k=6)),
                "url": f"https://docs.example.invalid/{seed}/{i}",
                "snippet": " ".join(local.choices(WORDS, k=40)),
                "score": round(local.random(), 3),
            }
            for i in range(n)
        ],
    }


def page(seed: int) -> dict:
    """A fetched page: its extracted text, about 1.5 KB."""
    local = random.Random(seed)
    return {
        "url": f"https://docs.example.invalid/page/{seed}",
        "status": 200,
        "text": " ".join(local.choices(WORDS, k=220)),
    }


class Run:
    def __init__(self, run_id: str, mode: str, ts: float) -> None:
        self.run_id, self.ts, self.n, self.calls, self.round = run_id, ts, 0, 0, 0
        self.events: list[dict] = []
        tools = [
            {"name": "search"},
            {"name": "fetch_page"},
            {"name": "wait_for_researchers", "repeat_exempt": True},
        ]
        self.add("run_started", mode=mode, tools=tools)  # the shared topic: its runs name no tenant

    def add(self, kind: str, **fields) -> None:
        self.n += 1
        self.ts += 0.7
        self.events.append(
            envelope(kind, self.run_id, f"{self.run_id}:{self.n}", round(self.ts, 3), **fields)
        )

    def round_of(self, calls: list[tuple[str, dict, str, object]]) -> None:
        self.round += 1
        self.add("round_started", round=self.round)
        for tool, args, status, result in calls:
            self.calls += 1
            call_id = f"call-{self.calls}"
            self.add("call_proposed", round=self.round, call_id=call_id, tool=tool, args=args)
            self.add(
                "call_result", round=self.round, call_id=call_id, tool=tool, status=status, result=result
            )
        self.add("round_ended", round=self.round)


def build_run(rng: random.Random, index: int, ts: float) -> Run:
    kind = rng.choices(
        ["paging", "reworded", "duplicate", "failing", "lead", "insisting", "chat"],
        [30, 25, 10, 5, 10, 10, 10],
    )[0]
    mode = "chat" if kind in ("insisting", "chat") else "researcher"
    run = Run(f"{kind}-{index}", mode, ts)
    topic = rng.randrange(10**9)
    if kind == "paging":
        for n in range(rng.randint(5, 25)):
            run.round_of(
                [
                    (
                        "search",
                        {"q": f"topic {topic}", "page": n},
                        "ok",
                        documents(rng, topic + n, rng.randint(4, 8)),
                    ),
                    (
                        "fetch_page",
                        {"url": f"https://docs.example.invalid/{topic}/{n}"},
                        "ok",
                        page(topic + n),
                    ),
                ]
            )
    elif kind == "reworded":
        for i in range(rng.randint(8, 21)):
            run.round_of(
                [
                    (
                        "search",
                        {"q": f"{' '.join(rng.choices(WORDS, k=4))} {topic} {i}"},
                        "ok",
                        documents(rng, topic, 6),
                    )
                ]
            )
    elif kind == "duplicate":
        run.round_of([("search", {"q": f"topic {topic}"}, "ok", documents(rng, topic, 5))])
        for _ in range(rng.randint(6, 10)):
            run.round_of([("search", {"q": f"topic {topic}"}, "ok", documents(rng, topic, 5))])
    elif kind == "failing":
        for i in range(rng.randint(6, 9)):
            run.round_of(
                [
                    (
                        "fetch_page",
                        {"url": f"https://example.invalid/{topic}/{i}"},
                        "error",
                        {"error": "upstream timeout", "attempt": i},
                    )
                ]
            )
    elif kind == "lead":
        for i in range(rng.randint(3, 12)):
            run.round_of(
                [("wait_for_researchers", {"ids": ["r1", "r2", "r3"]}, "ok", {"done": min(i, 3), "of": 3})]
            )
        run.round_of([("search", {"q": f"summary {topic}"}, "ok", documents(rng, topic, 3))])
    elif kind == "insisting":
        run.round_of(
            [
                ("search", {"q": f"price of {topic}"}, "ok", {"price": topic % 997})
                for _ in range(rng.randint(4, 8))
            ]
        )
    else:
        run.round_of(
            [
                ("search", {"q": f"q{topic} {i}"}, "ok", documents(rng, topic + i, 2))
                for i in range(rng.randint(1, 4))
            ]
        )
    run.add("run_ended", reason="answered")
    return run


def fleet_events(runs: int, seed: int = 7, live: int = 400) -> Iterator[dict]:
    """Events of `runs` runs, about `live` of them interleaved at any moment."""
    rng = random.Random(seed)
    pending = [build_run(rng, i, 1_700_000_000.0 + i) for i in range(runs)]
    active: list[tuple[Run, int]] = []
    while pending or active:
        while pending and len(active) < live:
            active.append((pending.pop(), 0))
        i = rng.randrange(len(active))
        run, pos = active[i]
        yield run.events[pos]
        if pos + 1 == len(run.events):
            active[i] = active[-1]
            active.pop()
        else:
            active[i] = (run, pos + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=24_000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "data" / "fleet.jsonl"))
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with out.open("wb") as f:
        for event in fleet_events(args.runs):
            f.write(orjson.dumps(event) + b"\n")
            count += 1
    print(f"wrote {count:,} events of {args.runs:,} runs to {out} ({out.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
