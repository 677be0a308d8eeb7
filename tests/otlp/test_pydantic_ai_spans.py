"""Pydantic AI's own instrumentation, exported by the OpenTelemetry SDK's OTLP/HTTP exporter to a
`stallwatch serve`: a looping agent judged from its spans as the adapter judges it in process."""

from __future__ import annotations

import asyncio

from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings

from stallwatch.adapters.pydantic_ai import Stallwatch
from stallwatch.client import EmbeddedClient
from stallwatch.engine.admin_policy import AdminPolicy
from tests.adapters import scripts
from tests.adapters.pydantic_ai_model import QUESTION, agent_for
from tests.otlp.receiver import decided, otlp_server, record_commands, would_have


def run_instrumented(script: scripts.Script, tools: scripts.Tools, provider) -> str:
    """The agent with no stallwatch in it, only its own instrumentation; its spans flushed."""
    # (agent_for takes any capability: here Pydantic AI's own instrumentation)
    agent = agent_for(script, tools, Instrumentation(InstrumentationSettings(tracer_provider=provider)))
    try:
        return agent.run_sync(QUESTION).output
    finally:
        assert provider.force_flush(30_000)  # exported and answered: the server has judged them


async def in_process(script: scripts.Script) -> list:
    """What the adapter decides in process for the same script (enforced): every command."""
    async with EmbeddedClient() as client:
        seen = record_commands(client)
        await agent_for(script, scripts.Tools(), Stallwatch(client, tools=scripts.DECLARED)).run(QUESTION)
    return seen


async def test_a_rewording_agent_would_have_been_nudged_and_stopped_at_the_adapters_rounds():
    async with otlp_server() as server:
        tools = scripts.Tools()
        answer = await asyncio.to_thread(
            run_instrumented, scripts.rewording(), tools, server.tracer_provider()
        )
        assert answer == scripts.ANSWER and tools.ran["search"] == 20  # nothing stopped it
        (commands,) = (await server.runs()).values()
        metrics = await server.metrics()
    expected = decided(await in_process(scripts.rewording()))
    assert expected == [("nudge", 4, ""), ("stop", 6, "no_new_facts")]
    observed = would_have(commands)
    # The same nudge and stop at the same rounds; then every later call would have been refused
    # as the stopped run's (rounds 7 to 20), where in process the model answered without tools.
    assert observed[:2] == expected
    assert observed[2:] == [("refuse", n, "run_stopped") for n in range(7, 21)]
    assert 'stallwatch_would_stops_total{code="no_new_facts",tenant="",tool=""} 1' in metrics
    assert 'stallwatch_otlp_items_total{outcome="tool"} 20' in metrics
    assert 'stallwatch_otlp_items_total{outcome="model"} 21' in metrics


async def test_a_repeated_call_would_have_been_refused_in_the_same_round():
    async with otlp_server() as server:
        tools = scripts.Tools()
        await asyncio.to_thread(run_instrumented, scripts.repeating(), tools, server.tracer_provider())
        (commands,) = (await server.runs()).values()
    assert tools.ran["search"] == 2
    assert (
        would_have(commands)
        == decided(await in_process(scripts.repeating()))
        == [("refuse", 2, "duplicate_call")]
    )


async def test_a_wait_is_a_repeat_from_spans_unless_the_administrator_declares_it():
    """Spans carry no tool declarations: the adapter's `repeat_exempt` wait must come from the
    administrator's policy file on this path."""
    async with otlp_server() as server:
        await asyncio.to_thread(
            run_instrumented, scripts.waiting(), scripts.Tools(), server.tracer_provider()
        )
        (undeclared,) = (await server.runs()).values()
    assert ("refuse", 2, "duplicate_call") in would_have(undeclared)
    async with otlp_server(AdminPolicy(exempt_patterns=("wait_for_*",))) as server:
        await asyncio.to_thread(
            run_instrumented, scripts.waiting(), scripts.Tools(), server.tracer_provider()
        )
        (declared,) = (await server.runs()).values()
    assert would_have(declared) == decided(await in_process(scripts.waiting())) == []


async def test_a_failing_tool_would_have_stopped_the_run_at_the_adapters_round():
    async with otlp_server() as server:
        tools = scripts.Tools()
        await asyncio.to_thread(run_instrumented, scripts.failing(), tools, server.tracer_provider())
        (commands,) = (await server.runs()).values()
    assert tools.ran["fetch"] == 10
    expected = decided(await in_process(scripts.failing()))
    assert expected == [("stop", 5, "tool_failures")]
    assert would_have(commands)[:1] == expected
