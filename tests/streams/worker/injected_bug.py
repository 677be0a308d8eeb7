"""A bug in the engine, met by calls of one tool only: what any future bug looks like to the
worker. Installed into worker processes by a `sitecustomize` on their PYTHONPATH, and into the
test's own replay with monkeypatch, so both meet it alike."""

from __future__ import annotations

from typing import Any

from stallwatch.engine.rules.researcher import ResearcherRules

TOOL = "boom"
# In the exception's message: it must never reach a dead letter.
MESSAGE = "never in a dead letter"
SITECUSTOMIZE = "from tests.streams.worker.injected_bug import install\ninstall()\n"


def with_bug(real: Any) -> Any:
    def refusal(
        self: ResearcherRules, state: Any, event: Any, tool: str, signature: Any, exempt: bool
    ) -> Any:
        if tool == TOOL:
            raise KeyError(MESSAGE)
        return real(self, state, event, tool, signature, exempt)

    return refusal


def install() -> None:
    ResearcherRules.refusal = with_bug(ResearcherRules.refusal)  # type: ignore[method-assign]
