/**
 * LangChain.js agents (`createAgent`): stallwatch as a middleware.
 *
 *   const agent = createAgent({ model, tools, middleware: [stallwatchMiddleware()] });
 *
 * One stallwatch run per agent invocation; a round per model call; each tool call proposed in
 * `wrapToolCall` before it runs. A refusal becomes the tool's message (status "error") without
 * the tool running; nudges and the stop's words go into the next model call's system message;
 * after a stop the model is called without tools (`answer_without_tools`) or not at all
 * (`end_turn`: the stop's words are the agent's last message). The result's `stallwatchStop` is
 * the stop that ended the run (`code`, `action`, `reason`), or null.
 */
import { AIMessage, SystemMessage, ToolMessage } from "@langchain/core/messages";
import { createMiddleware } from "langchain";
import { z } from "zod";

import { Guard, type GuardOptions, type ModelTurn, instructionsText, refusalText } from "../guard.js";

export { Guard, type GuardOptions } from "../guard.js";
export { StallwatchClient } from "../client.js";

type Tools = ReadonlyArray<{ name?: unknown } | object>;

export function stallwatchMiddleware(options: GuardOptions = {}) {
  const guards = new Map<string, Guard>(); // live runs by id; the id travels in the agent's state
  const guardOf = (state: { stallwatchRunId?: string }) => guards.get(state.stallwatchRunId ?? "");

  const crashed = async (guard: Guard) => {
    // the invocation raises past the middleware: no afterAgent is called, so the run ends here
    guards.delete(guard.runId);
    await guard.finish("raised");
  };

  return createMiddleware({
    name: "StallwatchMiddleware",
    stateSchema: z.object({
      stallwatchRunId: z.string().optional(),
      stallwatchStop: z.object({ code: z.string(), action: z.string(), reason: z.string() }).nullable().optional(),
    }),

    beforeAgent: () => {
      const guard = new Guard(options, "langchain");
      guards.set(guard.runId, guard);
      return { stallwatchRunId: guard.runId, stallwatchStop: null };
    },

    afterAgent: async (state) => {
      const guard = guardOf(state);
      if (!guard) return;
      guards.delete(guard.runId);
      await guard.finish(guard.stop ? "stopped" : "answered");
      return { stallwatchStop: guard.stop };
    },

    wrapModelCall: async (request, handler) => {
      const guard = guardOf(request.state);
      if (!guard) return handler(request);
      const turn = await guard.beginModelCall(toolNames(request.tools));
      if (turn.endingStop) return new AIMessage({ content: turn.endingStop.reason });
      try {
        return await handler(shaped(request, guard, turn));
      } catch (error) {
        await crashed(guard);
        throw error;
      }
    },

    wrapToolCall: async (request, handler) => {
      const guard = guardOf(request.state);
      if (!guard) return handler(request);
      const call = request.toolCall;
      const decision = await guard.propose(call.name, call.args);
      if (!decision.allowed) {
        return new ToolMessage({
          content: refusalText(decision),
          tool_call_id: call.id ?? "",
          name: call.name,
          status: "error",
        });
      }
      let out: Awaited<ReturnType<typeof handler>>;
      try {
        out = await handler(request);
      } catch (error) {
        await guard.report(decision.callId, call.name, false, null);
        await crashed(guard);
        throw error;
      }
      if (ToolMessage.isInstance(out)) {
        await guard.report(decision.callId, call.name, out.status !== "error", out.content);
      } else {
        await guard.report(decision.callId, call.name, true, null); // a Command: a state update, no content
      }
      return out;
    },
  });
}

function toolNames(tools: Tools): string[] {
  return tools.map((t) => ("name" in t && typeof t.name === "string" ? t.name : "")).filter(Boolean);
}

/** The request with the rules and this call's words in the system message; no tools after a
 * stop, so the model answers from what it gathered. */
function shaped<R extends { systemMessage: SystemMessage; tools: Tools; toolChoice?: unknown }>(
  request: R,
  guard: Guard,
  turn: ModelTurn,
): R {
  const extra = instructionsText(undefined, guard.rules(), turn.notes);
  const changes: Record<string, unknown> = {};
  if (extra) changes.systemMessage = appended(request.systemMessage, extra);
  if (!turn.toolsAllowed) Object.assign(changes, { tools: [], toolChoice: undefined });
  return Object.keys(changes).length ? { ...request, ...changes } : request;
}

/** The system message with stallwatch's text after it; content blocks (cache markers) kept. */
function appended(system: SystemMessage | undefined, extra: string): SystemMessage {
  const content = system?.content;
  if (!content || content.length === 0) return new SystemMessage(extra);
  if (typeof content === "string") return new SystemMessage(`${content}\n\n${extra}`);
  return new SystemMessage({ content: [...content, { type: "text", text: extra }] });
}
