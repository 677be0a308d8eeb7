// The AI SDK guarded by stallwatch, offline: a scripted model rewords one search until stopped.
// Run against `stallwatch serve` (STALLWATCH_SERVE_URL, default http://127.0.0.1:8737).
import { stallwatch, StallwatchClient } from "@stallwatch/client/ai";
import { generateText, isStepCount, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

const usage = { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } };
let step = 0;
const model = new MockLanguageModelV4({
  // the stand-in for an LLM: a new wording of the same search each step, an answer once tools are gone
  doGenerate: async ({ tools }) =>
    tools?.length
      ? {
          content: [{ type: "tool-call", toolCallId: `c${++step}`, toolName: "search", input: JSON.stringify({ q: `kafka compaction, wording ${step}` }) }],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        }
      : { content: [{ type: "text", text: "Kafka keeps the latest value per key." }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] },
});

const search = tool({
  description: "Search the docs",
  inputSchema: z.object({ q: z.string() }),
  execute: async () => ({ documents: [{ id: "kafka-docs", title: "Log compaction" }] }),
});

const client = new StallwatchClient({ baseUrl: process.env.STALLWATCH_SERVE_URL });
const settings = stallwatch({ client, stopWhen: isStepCount(30) }); // one stallwatch run
const result = await generateText({ model, tools: { search }, prompt: "How does Kafka compact a topic?", ...settings });
console.log(JSON.stringify({ answer: result.text, steps: result.steps.length, stop: settings.guard.stop?.code ?? null }));
