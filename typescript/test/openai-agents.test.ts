/** The OpenAI Agents JS adapter against a scripted `Model` and a real `stallwatch serve`. */
import { Agent, type Model, type ModelRequest, type ModelResponse, Usage, setTracingDisabled, tool } from "@openai/agents";
import { z } from "zod";

import { stallwatch } from "../src/adapters/openai-agents.js";
import { behaviourSuite } from "./behaviour.js";
import * as s from "./scripts.js";

setTracingDisabled(true); // offline: no traces to export

/** A Model that plays a script: what it was given, what it answers. */
export class ScriptedModel implements Model {
  private toolResultsSeen = 0;
  private calls = 0;
  constructor(private readonly script: s.Script) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const items = typeof request.input === "string" ? [] : request.input;
    const results = items.flatMap((item) => (item.type === "function_call_result" ? [JSON.stringify(item.output)] : []));
    const toolTexts = results.slice(this.toolResultsSeen);
    this.toolResultsSeen = results.length;
    const offered = request.tools.filter((t) => t.type === "function").map((t) => t.name);
    const planned = this.script.next({ tools: offered, instructions: request.systemInstructions ?? "", toolTexts });
    const output: ModelResponse["output"] =
      planned === null
        ? [
            {
              type: "message",
              role: "assistant",
              status: "completed",
              content: [{ type: "output_text", text: s.ANSWER }],
            },
          ]
        : planned.map(([name, args]) => ({
            type: "function_call" as const,
            callId: `call-${++this.calls}`,
            name,
            arguments: JSON.stringify(args),
            status: "completed" as const,
          }));
    return { usage: new Usage(), output, responseId: `response-${this.calls}` };
  }

  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("the scripted model does not stream");
  }
}

export function agentsTools(tools: s.Tools) {
  return [
    tool({ name: "search", description: "Search", parameters: z.object({ q: z.string() }), execute: (a) => tools.search(a) }),
    tool({
      name: "list_page",
      description: "A page",
      parameters: z.object({ page: z.number() }),
      execute: (a) => tools.list_page(a),
    }),
    tool({ name: "fetch", description: "Fetch", parameters: z.object({ url: z.string() }), execute: (a) => tools.fetch(a) }),
    tool({
      name: "wait_for_researchers",
      description: "Wait",
      parameters: z.object({}),
      execute: () => tools.wait_for_researchers({}),
    }),
  ];
}

behaviourSuite("OpenAI Agents JS", async (script, tools, client, policy) => {
  const agent = new Agent({
    name: "researcher",
    instructions: "You research Kafka.",
    model: new ScriptedModel(script),
    tools: agentsTools(tools),
  });
  const result = await stallwatch({ client, tools: s.DECLARED, policy }).run(agent, "How does Kafka compact a topic?", {
    maxTurns: 40,
  });
  return String(result.finalOutput);
});
