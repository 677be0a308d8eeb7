/** The Mastra adapter against `ai`'s MockLanguageModelV3 (an AI SDK v6 model, as Mastra takes) and a
 * real `stallwatch serve`. */
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { stallwatch } from "../src/adapters/mastra.js";
import { behaviourSuite } from "./behaviour.js";
import * as s from "./scripts.js";

type GenerateOptions = Parameters<MockLanguageModelV3["doGenerate"]>[0];

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** A MockLanguageModelV3 that plays a script: what it was given, what it answers. */
export function scriptedModelV3(script: s.Script): MockLanguageModelV3 {
  let toolResultsSeen = 0;
  let calls = 0;
  return new MockLanguageModelV3({
    doGenerate: async (options: GenerateOptions) => {
      const instructions = options.prompt
        .filter((m) => m.role === "system")
        .map((m) => m.content)
        .join("\n\n");
      const results = options.prompt.flatMap((m) =>
        m.role === "tool" ? m.content.filter((p) => p.type === "tool-result").map((p) => JSON.stringify(p.output)) : [],
      );
      const toolTexts = results.slice(toolResultsSeen);
      toolResultsSeen = results.length;
      const offered = (options.tools ?? []).map((t) => t.name);
      const planned = script.next({ tools: offered, instructions, toolTexts });
      if (planned === null) {
        return { content: [{ type: "text", text: s.ANSWER }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
      }
      return {
        content: planned.map(([name, args]) => ({
          type: "tool-call" as const,
          toolCallId: `call-${++calls}`,
          toolName: name,
          input: JSON.stringify(args),
        })),
        finishReason: { unified: "tool-calls", raw: "tool_calls" },
        usage,
        warnings: [],
      };
    },
  });
}

export function mastraTools(tools: s.Tools) {
  return {
    search: createTool({
      id: "search",
      description: "Search",
      inputSchema: z.object({ q: z.string() }),
      execute: async (a) => tools.search(a),
    }),
    list_page: createTool({
      id: "list_page",
      description: "A page",
      inputSchema: z.object({ page: z.number() }),
      execute: async (a) => tools.list_page(a),
    }),
    fetch: createTool({
      id: "fetch",
      description: "Fetch",
      inputSchema: z.object({ url: z.string() }),
      execute: async (a) => tools.fetch(a),
    }),
    wait_for_researchers: createTool({
      id: "wait_for_researchers",
      description: "Wait",
      inputSchema: z.object({}),
      execute: async () => tools.wait_for_researchers({}),
    }),
  };
}

behaviourSuite("Mastra", async (script, tools, client, policy) => {
  const agent = new Agent({
    id: "researcher",
    name: "researcher",
    instructions: "You research Kafka.",
    model: scriptedModelV3(script) as never, // ai's @ai-sdk/provider and Mastra's are other releases of one spec
    tools: mastraTools(tools),
  });
  const result = await agent.generate("How does Kafka compact a topic?", {
    maxSteps: 40,
    ...stallwatch({ client, tools: s.DECLARED, policy }),
  });
  // a stop that ends the turn is Mastra's tripwire: its reason is the run's last words
  return result.tripwire ? String(result.tripwire.reason) : result.text;
});
