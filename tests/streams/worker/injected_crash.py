"""An event that kills the worker applying it, as a crash in a native library or the kernel's OOM
killer would: calls of one tool SIGKILL the process. Installed into worker processes by a
`sitecustomize` on their PYTHONPATH."""

from __future__ import annotations

import os
import signal
from typing import Any

from stallwatch.engine.rules.researcher import ResearcherRules

TOOL = "kill-the-worker"
SITECUSTOMIZE = "from tests.streams.worker.injected_crash import install\ninstall()\n"


def with_crash(real: Any) -> Any:
    def refusal(
        self: ResearcherRules, state: Any, event: Any, tool: str, signature: Any, exempt: bool
    ) -> Any:
        if tool == TOOL:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, state, event, tool, signature, exempt)

    return refusal


def as_engine_fault(real: Any) -> Any:
    """What replay makes of the same event once a worker dead-letters it: a fault of the engine,
    whose run is quarantined alike."""

    def refusal(
        self: ResearcherRules, state: Any, event: Any, tool: str, signature: Any, exempt: bool
    ) -> Any:
        if tool == TOOL:
            raise RuntimeError("the worker died here")
        return real(self, state, event, tool, signature, exempt)

    return refusal


def install() -> None:
    ResearcherRules.refusal = with_crash(ResearcherRules.refusal)  # type: ignore[method-assign]
