"""A LangChain agent instrumented by OpenInference (`openinference-instrumentation-langchain`),
exported by the OpenTelemetry SDK's OTLP/HTTP exporter to a `stallwatch serve`: judged from its
spans as the LangChain adapter judges it in process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from openinference.instrumentation.langchain import LangChainInstrumentor

from stallwatch.adapters.langchain import StallwatchMiddleware
from stallwatch.client import EmbeddedClient
from tests.adapters import scripts
from tests.adapters.langchain_model import QUESTION, agent_for
from tests.otlp.receiver import decided, otlp_server, record_commands, would_have


@pytest.fixture
def instrumentor() -> Iterator[LangChainInstrumentor]:
    """OpenInference instruments LangChain process-wide: undone after the test."""
    instrumentor = LangChainInstrumentor()
    yield instrumentor
    instrumentor.uninstrument()


def run_instrumented(instrumentor: LangChainInstrumentor, script, tools, provider) -> str:
    instrumentor.instrument(tracer_provider=provider)
    try:
        out = agent_for(script, tools, None).invoke(QUESTION, {"recursion_limit": 100})
    finally:
        instrumentor.uninstrument()
        assert provider.force_flush(30_000)
    return out["messages"][-1].text


async def in_process(script: scripts.Script) -> list:
    async with EmbeddedClient() as client:
        seen = record_commands(client)
        middleware = StallwatchMiddleware(client, tools=scripts.DECLARED)
        await agent_for(script, scripts.Tools(), middleware).ainvoke(QUESTION, {"recursion_limit": 100})
    return seen


async def test_a_rewording_agent_would_have_been_nudged_and_stopped_at_the_adapters_rounds(instrumentor):
    async with otlp_server() as server:
        tools = scripts.Tools()
        answer = await asyncio.to_thread(
            run_instrumented, instrumentor, scripts.rewording(), tools, server.tracer_provider()
        )
        assert answer == scripts.ANSWER and tools.ran["search"] == 20
        (commands,) = (await server.runs()).values()
        metrics = await server.metrics()
    expected = decided(await in_process(scripts.rewording()))
    assert expected == [("nudge", 4, ""), ("stop", 6, "no_new_facts")]
    observed = would_have(commands)
    assert observed[:2] == expected
    assert observed[2:] == [("refuse", n, "run_stopped") for n in range(7, 21)]
    # The trace's root span (LangGraph's) ended the run: keyed by its trace, it has no session id.
    assert 'stallwatch_otlp_items_total{outcome="root"} 1' in metrics
    assert 'stallwatch_otlp_items_total{outcome="langchain_tool_message"} 20' in metrics


async def test_a_failing_tool_would_have_stopped_the_run(instrumentor):
    """LangChain handles the tool's error (the span's status stays OK): the failure is read from
    the recorded ToolMessage's `status`."""
    async with otlp_server() as server:
        tools = scripts.Tools()
        await asyncio.to_thread(
            run_instrumented, instrumentor, scripts.failing(), tools, server.tracer_provider()
        )
        (commands,) = (await server.runs()).values()
    assert tools.ran["fetch"] == 10
    expected = decided(await in_process(scripts.failing()))
    assert expected == [("stop", 5, "tool_failures")]
    assert would_have(commands)[:1] == expected
