/** The AI SDK adapter against `ai`'s own MockLanguageModelV4 and a real `stallwatch serve`. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { generateText, isStepCount, simulateReadableStream, streamText, tool, type ToolSet } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

import { stallwatch } from "../src/adapters/ai.js";
import { StallwatchClient } from "../src/client.js";
import { behaviourSuite } from "./behaviour.js";
import { engineWords, type Serve, startServe } from "./harness.js";
import * as s from "./scripts.js";

type GenerateOptions = Parameters<MockLanguageModelV4["doGenerate"]>[0];

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** A MockLanguageModelV4 that plays a script: what it was given, what it answers. */
export function scriptedModel(script: s.Script): MockLanguageModelV4 {
  let toolResultsSeen = 0;
  let calls = 0;
  return new MockLanguageModelV4({
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

/** The same scripted model, streaming: each response as the stream parts a provider sends. */
function streamingModel(script: s.Script): MockLanguageModelV4 {
  const whole = scriptedModel(script);
  return new MockLanguageModelV4({
    doStream: async (options) => {
      const { content, finishReason } = await whole.doGenerate(options);
      const parts = content.flatMap((part): unknown[] =>
        part.type === "text"
          ? [
              { type: "text-start" as const, id: "t" },
              { type: "text-delta" as const, id: "t", delta: part.text },
              { type: "text-end" as const, id: "t" },
            ]
          : [part],
      );
      const chunks = [{ type: "stream-start", warnings: [] }, ...parts, { type: "finish", finishReason, usage }];
      return { stream: simulateReadableStream({ chunks: chunks as never[] }) };
    },
  });
}

export function aiTools(tools: s.Tools): ToolSet {
  return {
    search: tool({ description: "Search", inputSchema: z.object({ q: z.string() }), execute: (a) => tools.search(a) }),
    list_page: tool({ description: "A page", inputSchema: z.object({ page: z.number() }), execute: (a) => tools.list_page(a) }),
    fetch: tool({ description: "Fetch", inputSchema: z.object({ url: z.string() }), execute: (a) => tools.fetch(a) }),
    wait_for_researchers: tool({
      description: "Wait",
      inputSchema: z.object({}),
      execute: () => tools.wait_for_researchers({}),
    }),
  };
}

behaviourSuite(
  "AI SDK",
  async (script, tools, client, policy) => {
  const result = await generateText({
    model: scriptedModel(script),
    tools: aiTools(tools),
    instructions: "You research Kafka.",
    prompt: "How does Kafka compact a topic?",
    ...stallwatch({ client, tools: s.DECLARED, policy, stopWhen: isStepCount(40) }),
  });
    return result.text;
  },
  false, // the AI SDK's loop ends at a stop; it has no last words to give
);

let serve: Serve;
before(async () => {
  serve = await startServe();
});
after(() => serve?.stop());

test("AI SDK, streamText: a rewording model is stopped, then answers without tools; the run ends", async () => {
  const words = engineWords();
  const script = s.scripts.rewording();
  const tools = new s.Tools();
  const client = new StallwatchClient({ baseUrl: serve.url, verdictTimeoutMs: 30_000 });
  const settings = stallwatch({ client, tools: s.DECLARED, stopWhen: isStepCount(40) });
  const result = streamText({
    model: streamingModel(script),
    tools: aiTools(tools),
    prompt: "How does Kafka compact a topic?",
    ...settings,
  });
  const answer = await result.text;
  s.assertStoppedThenAnswered(words, script, tools, answer);
  assert.equal(settings.guard.stop?.code, "no_new_facts");
  await result.consumeStream();
  // onFinish ended the run: the server has forgotten it
  const gone = await fetch(`${serve.url}/v1/runs/${settings.guard.runId}`);
  assert.equal(gone.status, 404);
});
