from __future__ import annotations

import orjson
import pytest

from stallwatch.contract.parse import parse_event
from stallwatch.engine.embedded import EmbeddedEngine
from tests.script import RunScript


class Outcome:
    """Commands an engine produced for a script, with views tests ask about."""

    def __init__(self, engine: EmbeddedEngine, script: RunScript) -> None:
        self.engine = engine
        self.commands = []
        for raw in script.events:
            self.commands.extend(engine.handle(parse_event(orjson.dumps(raw))))

    @property
    def verdicts(self):
        return [c for c in self.commands if c.type == "verdict"]

    @property
    def stops(self):
        return [c for c in self.commands if c.type == "stop"]

    def codes(self) -> list:
        return [c.code for c in self.verdicts]


@pytest.fixture
def run():
    """Apply a script to a fresh engine: `run(script)` -> Outcome."""

    def apply(script: RunScript, engine: EmbeddedEngine | None = None) -> Outcome:
        return Outcome(engine or EmbeddedEngine(), script)

    return apply
