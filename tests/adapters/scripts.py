"""What the scripted models of every framework do, and the tools they call: framework-free."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from stallwatch.engine import words

ANSWER = "Kafka keeps the latest value per key by compacting its log."
STOP_WORDS = words.stop_reason("no_new_facts", {"already_seen_streak": 5})
FAILURE_WORDS = words.stop_reason("tool_failures", {"tool": "fetch", "consecutive_failures": 5})
TIME_WORDS = words.stop_reason("time_limit", {"time_limit_s": 0.3})
# The run's time is up before its first search (0.6 s) has answered: the stop ends the turn.
OUT_OF_TIME = {"time_limit_s": 0.3}
SLOW_SEARCH_S = 0.6

# The declarations every adapter test passes: the wait is its protocol, never a repeat.
DECLARED = ({"name": "wait_for_researchers", "repeat_exempt": True},)


@dataclass
class Seen:
    """What the model was given at one call."""

    tools: list[str]
    instructions: str
    tool_texts: list[str]  # the tool messages since its previous call


Call = tuple[str, dict[str, Any]]


@dataclass
class Script:
    """A model that makes its planned calls while it has tools, then answers. Each turn is one
    call, or a list of calls made together (parallel tool calls)."""

    calls: list[Call | list[Call]]
    seen: list[Seen] = field(default_factory=list)

    def next(self, seen: Seen) -> list[Call] | None:
        """The calls to make now, or None to answer."""
        self.seen.append(seen)
        turn = len(self.seen) - 1
        if not seen.tools or turn >= len(self.calls):
            return None
        planned = self.calls[turn]
        return planned if isinstance(planned, list) else [planned]

    @property
    def tool_texts(self) -> list[str]:
        return [t for s in self.seen for t in s.tool_texts]


def rewording(n: int = 20) -> Script:
    """Rewords one search; every wording gets the same documents back."""
    return Script([("search", {"q": f"how does kafka compact a topic (wording {i})"}) for i in range(n)])


def repeating() -> Script:
    """Asks the very same search twice, then answers."""
    return Script([("search", {"q": "kafka compaction"})] * 2)


def parallel_repeat() -> Script:
    """Asks the very same search twice in one response, then answers."""
    return Script([[("search", {"q": "kafka compaction"})] * 2])


def paging(pages: int = 12) -> Script:
    """Reads one page after another; each page brings new documents."""
    return Script([("list_page", {"page": p}) for p in range(1, pages + 1)])


def failing(n: int = 10) -> Script:
    """Fetches one address after another; every fetch fails."""
    return Script([("fetch", {"url": f"https://example.org/{i}"}) for i in range(n)])


def waiting(times: int = 8) -> Script:
    """A lead that waits for its researchers again and again with the same arguments."""
    return Script([("wait_for_researchers", {})] * times)


class FetchFailed(Exception):
    pass


class Tools:
    """The tools' behaviour and how often each ran. `search` takes `search_s` seconds."""

    def __init__(self, search_s: float = 0.0) -> None:
        self.ran: Counter[str] = Counter()
        self.search_s = search_s

    def search(self, q: str) -> str:
        self.ran["search"] += 1
        time.sleep(self.search_s)  # the thing under test: a tool that takes this long to answer
        return json.dumps(
            {
                "documents": [
                    {"id": "kafka-docs", "title": "Log compaction"},
                    {"id": "faust-docs", "title": "Tables"},
                ]
            }
        )

    def list_page(self, page: int) -> str:
        self.ran["list_page"] += 1
        return json.dumps({"page": page, "documents": [{"id": f"doc-{page}-{i}"} for i in range(3)]})

    def fetch(self, url: str) -> str:
        """Fails every time: each framework's adapter test turns this into its failure idiom."""
        self.ran["fetch"] += 1
        raise FetchFailed(f"{url} did not answer")

    def wait_for_researchers(self) -> str:
        self.ran["wait_for_researchers"] += 1
        return "2 of 3 researchers still running"


# What every adapter must make of each script (the framework's final answer passed in).


def assert_stopped_then_answered(script: Script, tools: Tools, answer: str) -> None:
    """Six searches ran (one new result, five already seen), the model was nudged at the third
    already-seen round, then called without tools and told why, and answered."""
    assert tools.ran["search"] == 6
    assert any(words.nudge(3) in s.instructions for s in script.seen)
    last = script.seen[-1]
    assert last.tools == [] and STOP_WORDS in last.instructions
    assert all(s.tools for s in script.seen[:-1])
    assert answer == ANSWER


def assert_failures_stopped(script: Script, tools: Tools, answer: str) -> None:
    """Five failures of one tool in a row stop the run; the model answers without tools."""
    assert tools.ran["fetch"] == 5
    last = script.seen[-1]
    assert last.tools == [] and FAILURE_WORDS in last.instructions
    assert answer == ANSWER


def assert_repeat_refused(script: Script, tools: Tools, answer: str) -> None:
    assert tools.ran["search"] == 1
    assert any(words.duplicate_call("search") in t for t in script.tool_texts)
    assert answer == ANSWER


def assert_untouched(script: Script, tools: Tools, tool: str, times: int, answer: str) -> None:
    """Every call ran, the model always had its tools, and stallwatch said nothing."""
    assert tools.ran[tool] == times
    assert all(s.tools for s in script.seen)
    assert not any("stallwatch:" in t for t in script.tool_texts)
    assert not any("stallwatch:" in s.instructions for s in script.seen)
    assert answer == ANSWER
