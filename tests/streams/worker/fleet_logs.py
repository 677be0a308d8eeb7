"""Event logs for the worker tests: one run per rule, and a larger mixed fleet."""

from __future__ import annotations

from tests.script import RunScript

DOCS = {"documents": [{"id": "d1"}, {"id": "d2"}]}


def every_rule() -> list[RunScript]:
    """A run for each rule the contract states, as the replay tests know them."""
    looper = RunScript("looper")
    for i in range(8):
        looper.round_of(("search", {"q": f"wording {i}"}, DOCS))
    pager = RunScript("pager")
    for i in range(8):
        pager.round_of(("search", {"q": "x", "page": i}, {"docs": [i]}))
    duplicate = RunScript("duplicate")
    duplicate.round_of(("search", {"q": "a"}, DOCS))
    for _ in range(6):
        duplicate.start_round()
        duplicate.call("search", {"q": "a"})
        duplicate.end_round()
    failing = RunScript("failing")
    failing.start_round()
    for i in range(6):
        failing.call("search", {"q": i}, status="error", result={"error": "timeout"})
    failing.end_round()
    budget = RunScript("budget", policy={"call_budget": 3})
    budget.start_round()
    for i in range(5):
        budget.call("search", {"q": i}, status="ok", result={"n": i})
    budget.end_round()
    limit = RunScript("limit", policy={"max_rounds": 3})
    for i in range(5):
        limit.round_of(("search", {"q": i}, {"n": i}))
    timed = RunScript("timed", policy={"time_limit_s": 5})
    timed.round_of(("search", {"q": 1}, {"n": 1}))
    timed.ts += 10
    timed.round_of(("search", {"q": 2}, {"n": 2}))
    chat = RunScript("chat", mode="chat", tools=[{"name": "price"}, {"name": "wait", "repeat_exempt": True}])
    chat.start_round()
    for _ in range(2):
        chat.call("price", {"s": "ACME"}, status="ok", result={"p": 1})
    for _ in range(6):
        chat.call("price", {"s": "ACME"})  # refused: no result follows
    for _ in range(4):
        chat.call("wait", {"job": 1}, status="ok", result={"state": "running"})
    chat.end_round()
    for script in (looper, pager, duplicate, failing, budget, limit, timed, chat):
        script.end()
    return [looper, pager, duplicate, failing, budget, limit, timed, chat]


def mixed_fleet(runs: int, rounds: int = 12) -> list[RunScript]:
    """Loopers, pagers and insisting chats, many of each."""
    scripts = []
    for i in range(runs):
        kind = ("looper", "pager", "chat")[i % 3]
        if kind == "chat":
            s = RunScript(f"{kind}-{i}", mode="chat", tools=[{"name": "price"}])
            s.start_round()
            for _ in range(rounds):
                s.call("price", {"s": i}, status="ok", result={"p": i})
            s.end_round()
        else:
            s = RunScript(f"{kind}-{i}")
            for r in range(rounds):
                result = DOCS if kind == "looper" else {"docs": [i, r]}
                s.round_of(("search", {"q": f"{i} {r}"}, result))
        s.end()
        scripts.append(s)
    return scripts


def interleave(scripts: list[RunScript]) -> list[bytes]:
    """The runs' lines merged round robin, each run's own order kept."""
    logs = [s.lines() for s in scripts]
    out = []
    for i in range(max(map(len, logs))):
        out.extend(log[i] for log in logs if i < len(log))
    return out
