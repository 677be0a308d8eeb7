// OpenAI Agents JS guarded by stallwatch, offline: a scripted Model rewords one search until
// stopped. Run against `stallwatch serve` (STALLWATCH_SERVE_URL).
import { stallwatch, StallwatchClient } from "@stallwatch/client/openai-agents";
import { Agent, Usage, setTracingDisabled, tool } from "@openai/agents";
import { z } from "zod";

setTracingDisabled(true); // offline: no traces sent
let n = 0;
/** The stand-in for an LLM: a new wording of the same search per call, an answer once tools are gone. */
const model = {
  async getResponse(request) {
    n += 1;
    const output = request.tools.length
      ? [{ type: "function_call", callId: `c${n}`, name: "search", arguments: JSON.stringify({ q: `kafka compaction, wording ${n}` }), status: "completed" }]
      : [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Kafka keeps the latest value per key." }] }];
    return { usage: new Usage(), output };
  },
  async *getStreamedResponse() {
    throw new Error("not streamed here");
  },
};

const search = tool({
  name: "search",
  description: "Search the docs",
  parameters: z.object({ q: z.string() }),
  execute: async () => JSON.stringify({ documents: [{ id: "kafka-docs" }] }),
});
const agent = new Agent({ name: "researcher", instructions: "You research Kafka.", model, tools: [search] });

const watch = stallwatch({ client: new StallwatchClient({ baseUrl: process.env.STALLWATCH_SERVE_URL }) });
const result = await watch.run(agent, "How does Kafka compact a topic?", { maxTurns: 30 });
console.log(JSON.stringify({ answer: result.finalOutput, stop: watch.stop?.code ?? null }));
