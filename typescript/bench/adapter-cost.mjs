// What guarding costs an AI SDK agent per tool call, through a real `stallwatch serve`: the same
// scripted agent (one new page read per step, never stopped) bare and guarded, alternated, in one
// run so that load on the machine weighs on both. Usage: node bench/adapter-cost.mjs [steps] [rounds]
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { StallwatchClient, stallwatch } from "@stallwatch/client/ai";
import { generateText, isStepCount, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

const STEPS = Number(process.argv[2] ?? 30); // researcher mode stops a run at its call budget (40)
const ROUNDS = Number(process.argv[3] ?? 7);
const VENV = process.env.STALLWATCH_VENV ?? resolve(fileURLToPath(import.meta.url), "../../../.venv");

const usage = { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } };
function pagingModel() {
  let step = 0;
  return new MockLanguageModelV4({
    doGenerate: async () => {
      step += 1;
      if (step > STEPS) {
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
      }
      const call = { type: "tool-call", toolCallId: `c${step}`, toolName: "list_page", input: JSON.stringify({ page: step }) };
      return { content: [call], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] };
    },
  });
}
const tools = {
  list_page: tool({
    description: "A page of documents",
    inputSchema: z.object({ page: z.number() }),
    execute: async ({ page }) => ({ page, documents: [0, 1, 2].map((i) => ({ id: `doc-${page}-${i}` })) }),
  }),
};

async function timed(settings) {
  const started = process.hrtime.bigint();
  const result = await generateText({ model: pagingModel(), tools, prompt: "Read every page.", stopWhen: isStepCount(STEPS + 2), ...settings });
  const elapsed = Number(process.hrtime.bigint() - started) / 1e3; // µs
  if (result.steps.length !== STEPS + 1) throw new Error(`expected ${STEPS + 1} steps, got ${result.steps.length}`);
  return elapsed / STEPS;
}

const port = await new Promise((ok) => {
  const s = createServer().listen(0, "127.0.0.1", () => {
    const { port } = s.address();
    s.close(() => ok(port));
  });
});
const serve = spawn(resolve(VENV, "bin/stallwatch"), ["serve", "--port", String(port), "--open"], { stdio: ["ignore", "pipe", "pipe"] });
await new Promise((ok, fail) => {
  const timer = setTimeout(() => fail(new Error("serve did not start")), 60_000);
  for (const stream of [serve.stdout, serve.stderr]) {
    createInterface({ input: stream }).on("line", (line) => line.includes("listening on") && (clearTimeout(timer), ok()));
  }
});
try {
  const client = new StallwatchClient({ baseUrl: `http://127.0.0.1:${port}`, verdictTimeoutMs: 30_000 });
  await timed({});
  await timed(stallwatch({ client, stopWhen: isStepCount(STEPS + 2) })); // warm both paths
  const bare = [];
  const guarded = [];
  for (let i = 0; i < ROUNDS; i++) {
    bare.push(await timed({}));
    const settings = stallwatch({ client, stopWhen: isStepCount(STEPS + 2) });
    guarded.push(await timed(settings));
    if (settings.guard.stop) throw new Error(`a paging agent was stopped: ${settings.guard.stop.code}`);
  }
  // the client alone: the same four requests per call, no agent around them
  const alone = [];
  for (let i = 0; i < ROUNDS; i++) {
    const run = await client.startRun(`bench-client-${i}`, { tools: [{ name: "list_page" }] });
    const started = process.hrtime.bigint();
    for (let page = 1; page <= STEPS; page++) {
      await run.startRound();
      const decision = await run.propose("list_page", { page });
      await run.result(decision.callId, "list_page", { result: { page, documents: [0, 1, 2].map((d) => ({ id: `doc-${page}-${d}` })) } });
      await run.endRound();
    }
    alone.push(Number(process.hrtime.bigint() - started) / 1e3 / STEPS);
    await run.end();
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const [b, g] = [median(bare), median(guarded)];
  console.log(`AI SDK agent, ${STEPS} tool calls per run, median of ${ROUNDS} runs (µs per tool call)`);
  console.log(`  bare agent                 ${b.toFixed(0).padStart(8)}`);
  console.log(`  guarded through serve      ${g.toFixed(0).padStart(8)}`);
  console.log(`  stallwatch's cost per call ${(g - b).toFixed(0).padStart(8)}`);
  console.log(`  the client alone, no agent ${median(alone).toFixed(0).padStart(8)}  (4 requests: round, call, result, round end)`);
} finally {
  serve.kill("SIGTERM");
}
