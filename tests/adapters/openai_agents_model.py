"""The Agents SDK's own ScriptedModel, each step answered by a Script from what the model was given."""

from __future__ import annotations

from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from stallwatch.adapters.openai_agents import StallwatchRun
from stallwatch.client import EmbeddedClient
from tests.adapters import scripts
from tests.adapters.scripts import ANSWER, Script, Seen, Tools

MAX_STEPS = 40  # more model calls than any script makes

set_tracing_disabled(True)  # no trace exporter: the tests make no network call


def model_for(script: Script, steps: int = MAX_STEPS) -> ScriptedModel:
    def respond(call: ModelCall) -> list[Any]:
        items = call.input if isinstance(call.input, list) else []
        recent: list[str] = []
        for item in reversed(items):
            if not (isinstance(item, dict) and item.get("type") == "function_call_output"):
                break
            recent.insert(0, str(item.get("output")))
        calls = script.next(Seen([t.name for t in call.tools], call.system_instructions or "", recent))
        if calls is None:
            return [assistant_message(ANSWER)]
        turn = len(script.seen)
        return [function_call(name, args, call_id=f"fc-{turn}-{i}") for i, (name, args) in enumerate(calls)]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(steps)])


def agent_for(script: Script, tools: Tools, steps: int = MAX_STEPS) -> Agent[Any]:
    def search(q: str) -> str:
        """Search documents."""
        return tools.search(q)

    def list_page(page: int) -> str:
        """Read a page of documents."""
        return tools.list_page(page)

    def wait_for_researchers() -> str:
        """Wait for the researchers."""
        return tools.wait_for_researchers()

    def fetch(url: str) -> str:
        """Fetch a page (its exception becomes the SDK's default failure text)."""
        return tools.fetch(url)

    return Agent(
        name="researcher",
        instructions="You research questions.",
        model=model_for(script, steps),
        tools=[function_tool(f) for f in (search, list_page, wait_for_researchers, fetch)],
    )


QUESTION = "How does Kafka compact a topic?"


async def run_agent(
    script: scripts.Script, tools: scripts.Tools | None = None, policy: dict | None = None
) -> tuple[scripts.Tools, str]:
    tools = tools or scripts.Tools()
    async with EmbeddedClient() as client:
        watch = StallwatchRun(client, tools=scripts.DECLARED, policy=policy)
        try:
            result = await Runner.run(
                watch.agent(agent_for(script, tools)), QUESTION, hooks=watch, max_turns=60
            )
        finally:
            assert not client.runs  # the run was ended and forgotten, also when the turn ended
    return tools, result.final_output
