// A Mastra agent guarded by stallwatch, offline: a scripted model rewords one search until
// stopped. Run against `stallwatch serve` (STALLWATCH_SERVE_URL).
import { stallwatch, StallwatchClient } from "@stallwatch/client/mastra";
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

const usage = { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } };
let n = 0;
const model = new MockLanguageModelV3({
  // the stand-in for an LLM: a new wording of the same search per step, an answer once tools are gone
  doGenerate: async ({ tools }) =>
    tools?.length
      ? {
          content: [{ type: "tool-call", toolCallId: `c${++n}`, toolName: "search", input: JSON.stringify({ q: `kafka compaction, wording ${n}` }) }],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        }
      : { content: [{ type: "text", text: "Kafka keeps the latest value per key." }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] },
});

const search = createTool({
  id: "search",
  description: "Search the docs",
  inputSchema: z.object({ q: z.string() }),
  execute: async () => ({ documents: [{ id: "kafka-docs" }] }),
});
const agent = new Agent({ id: "researcher", name: "researcher", instructions: "You research Kafka.", model, tools: { search } });

const options = stallwatch({ client: new StallwatchClient({ baseUrl: process.env.STALLWATCH_SERVE_URL }) });
const result = await agent.generate("How does Kafka compact a topic?", { maxSteps: 30, ...options });
console.log(JSON.stringify({ answer: result.text, stop: options.guard.stop?.code ?? null }));
