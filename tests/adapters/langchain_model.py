"""LangChain's own fake chat model, driven by a script: sees the tools it is offered, calls or answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool

from stallwatch.adapters.langchain import StallwatchMiddleware
from stallwatch.client import EmbeddedClient
from tests.adapters import scripts
from tests.adapters.scripts import ANSWER, FetchFailed, Script, Seen, Tools


class ScriptedChatModel(GenericFakeChatModel):
    """GenericFakeChatModel whose next message comes from a Script instead of a fixed list."""

    script: Any = None

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        tools = [t["function"]["name"] for t in kwargs.get("tools") or []]
        system = next((m.text for m in messages if isinstance(m, SystemMessage)), "")
        recent: list[str] = []
        for m in reversed(messages):
            if not isinstance(m, ToolMessage):
                break
            recent.insert(0, m.text)
        calls = self.script.next(Seen(tools, system, recent))
        if calls is None:
            message = AIMessage(content=ANSWER)
        else:
            turn = len(self.script.seen)
            message = AIMessage(
                content="",
                tool_calls=[
                    {"name": name, "args": args, "id": f"tc-{turn}-{i}", "type": "tool_call"}
                    for i, (name, args) in enumerate(calls)
                ],
            )
        return ChatResult(generations=[ChatGeneration(message=message)])


def agent_for(script: Script, tools: Tools, middleware: StallwatchMiddleware | None) -> Any:
    def fetch(url: str) -> str:
        try:
            return tools.fetch(url)
        except FetchFailed as exc:
            raise ToolException(str(exc)) from exc  # LangChain's idiom: an error ToolMessage

    lc_tools = [
        StructuredTool.from_function(tools.search, name="search", description="Search documents."),
        StructuredTool.from_function(tools.list_page, name="list_page", description="Read a page."),
        StructuredTool.from_function(
            tools.wait_for_researchers, name="wait_for_researchers", description="Wait for the researchers."
        ),
        StructuredTool.from_function(
            fetch, name="fetch", description="Fetch a page.", handle_tool_error=True
        ),
    ]
    model = ScriptedChatModel(messages=iter(()), script=script)
    return create_agent(
        model,
        lc_tools,
        system_prompt="You research questions.",
        middleware=[middleware] if middleware else [],
    )


QUESTION = {"messages": [{"role": "user", "content": "How does Kafka compact a topic?"}]}


async def run_agent(
    script: scripts.Script, tools: scripts.Tools | None = None, policy: dict | None = None
) -> tuple[scripts.Tools, str]:
    tools = tools or scripts.Tools()
    async with EmbeddedClient() as client:
        agent = agent_for(script, tools, StallwatchMiddleware(client, tools=scripts.DECLARED, policy=policy))
        out = await agent.ainvoke(QUESTION, {"recursion_limit": 100})
        assert not client.runs  # the run was ended and forgotten
    return tools, out["messages"][-1].text
