// LangChain.js `createAgent` guarded by stallwatch, offline: a scripted chat model rewords one
// search until stopped. Run against `stallwatch serve` (STALLWATCH_SERVE_URL).
import { stallwatchMiddleware, StallwatchClient } from "@stallwatch/client/langchain";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage } from "@langchain/core/messages";
import { createAgent, tool } from "langchain";
import { z } from "zod";

/** The stand-in for an LLM: a new wording of the same search per call, an answer once tools are gone. */
class ScriptedModel extends BaseChatModel {
  constructor(tools = [], counter = { n: 0 }) {
    super({});
    this.tools = tools;
    this.counter = counter;
  }
  _llmType() {
    return "scripted";
  }
  bindTools(tools) {
    return new ScriptedModel(tools, this.counter);
  }
  async _generate() {
    const n = ++this.counter.n;
    const message = this.tools.length
      ? new AIMessage({ content: "", tool_calls: [{ name: "search", args: { q: `kafka compaction, wording ${n}` }, id: `c${n}` }] })
      : new AIMessage("Kafka keeps the latest value per key.");
    return { generations: [{ text: message.text, message }] };
  }
}

const search = tool(async () => JSON.stringify({ documents: [{ id: "kafka-docs" }] }), {
  name: "search",
  description: "Search the docs",
  schema: z.object({ q: z.string() }),
});

const client = new StallwatchClient({ baseUrl: process.env.STALLWATCH_SERVE_URL });
const agent = createAgent({ model: new ScriptedModel(), tools: [search], middleware: [stallwatchMiddleware({ client })] });
const out = await agent.invoke({ messages: [{ role: "user", content: "How does Kafka compact a topic?" }] });
console.log(JSON.stringify({ answer: out.messages.at(-1).text, stop: out.stallwatchStop?.code ?? null }));
