"""Which attributes of which convention say what stallwatch judges: model calls, tool calls, their
arguments and results, and the run they belong to. Names are read from each emitter's own
conventions (docs/otlp.md has the table); an attribute not listed here is never guessed at."""

from __future__ import annotations

# The run: the first of these a span or log record carries; else (spans only) its trace id.
RUN_KEYS = ("gen_ai.conversation.id", "session.id", "langfuse.session.id", "conversation.id")

# GenAI semantic conventions (Pydantic AI, Logfire, OpenLLMetry, OpenLIT, the AI SDK, ADK).
OPERATION = "gen_ai.operation.name"
MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
TOOL_OPERATION = "execute_tool"
# OpenInference (Phoenix, Arize): the span kind says what the span is.
SPAN_KIND = "openinference.span.kind"
# OpenLLMetry's own span kind, for its instrumentations that set no GenAI operation.
TRACELOOP_KIND = "traceloop.span.kind"

# Tool name, call id, arguments and result, in order of preference per attribute.
TOOL_NAME = ("gen_ai.tool.name", "tool.name", "ai.toolCall.name", "traceloop.entity.name")
TOOL_CALL_ID = ("gen_ai.tool.call.id", "tool_call.id", "tool.id", "ai.toolCall.id")
TOOL_ARGUMENTS = (
    "gen_ai.tool.call.arguments",  # GenAI (Pydantic AI v3+, OpenLLMetry, OpenLIT, AI SDK)
    "gcp.vertex.agent.tool_call_args",  # Google ADK
    "input.value",  # OpenInference TOOL spans
    "ai.toolCall.args",  # the AI SDK's legacy span
    "traceloop.entity.input",  # OpenLLMetry's older instrumentations
    "tool_arguments",  # Pydantic AI's instrumentation version 2
)
TOOL_RESULT = (
    "gen_ai.tool.call.result",
    "gcp.vertex.agent.tool_response",
    "output.value",
    "ai.toolCall.result",
    "traceloop.entity.output",
    "tool_response",
)

# Log events (Codex, Claude Code): a model request opens a round; a tool result is a call and
# its result at once. Claude Code sends no result: only whether the tool succeeded.
MODEL_EVENTS = frozenset({"codex.api_request", "claude_code.api_request"})
TOOL_EVENTS = frozenset({"codex.tool_result", "claude_code.tool_result"})
EVENT_TOOL_NAME = ("tool_name", "tool.name")
EVENT_CALL_ID = ("call_id", "tool_use_id", "tool_call_id")
EVENT_ARGUMENTS = ("arguments", "tool_parameters", "tool_input")
EVENT_RESULT = ("output",)
EVENT_SUCCESS = "success"
