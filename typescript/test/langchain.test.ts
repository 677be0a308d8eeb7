/** The LangChain.js middleware on `createAgent`, against a scripted chat model and a real serve. */
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, type BaseMessage } from "@langchain/core/messages";
import type { ChatResult } from "@langchain/core/outputs";
import { createAgent, tool, toolErrorMiddleware } from "langchain";
import { z } from "zod";

import { stallwatchMiddleware } from "../src/adapters/langchain.js";
import { behaviourSuite } from "./behaviour.js";
import * as s from "./scripts.js";

interface Shared {
  script: s.Script;
  toolResultsSeen: number;
  calls: number;
}

/** A LangChain chat model that plays a script: what it was given, what it answers. */
class ScriptedChatModel extends BaseChatModel {
  constructor(
    private readonly shared: Shared,
    private readonly bound: string[] = [],
  ) {
    super({});
  }

  _llmType(): string {
    return "scripted";
  }

  override bindTools(tools: unknown[]): ScriptedChatModel {
    return new ScriptedChatModel(
      this.shared,
      tools.map((t) => String((t as { name?: string }).name)),
    );
  }

  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    const shared = this.shared;
    const instructions = messages
      .filter((m) => m.type === "system")
      .map((m) => m.text)
      .join("\n\n");
    const results = messages.filter((m) => m.type === "tool").map((m) => m.text);
    const toolTexts = results.slice(shared.toolResultsSeen);
    shared.toolResultsSeen = results.length;
    const planned = shared.script.next({ tools: this.bound, instructions, toolTexts });
    const message =
      planned === null
        ? new AIMessage(s.ANSWER)
        : new AIMessage({
            content: "",
            tool_calls: planned.map(([name, args]) => ({ name, args, id: `call-${++shared.calls}`, type: "tool_call" })),
          });
    return { generations: [{ text: message.text, message }] };
  }
}

export function langchainTools(tools: s.Tools) {
  return [
    tool((a: { q: string }) => tools.search(a), { name: "search", description: "Search", schema: z.object({ q: z.string() }) }),
    tool((a: { page: number }) => tools.list_page(a), {
      name: "list_page",
      description: "A page",
      schema: z.object({ page: z.number() }),
    }),
    tool((a: { url: string }) => tools.fetch(a), { name: "fetch", description: "Fetch", schema: z.object({ url: z.string() }) }),
    tool(() => tools.wait_for_researchers({}), {
      name: "wait_for_researchers",
      description: "Wait",
      schema: z.object({}),
    }),
  ];
}

export function scriptedChatModel(script: s.Script): BaseChatModel {
  return new ScriptedChatModel({ script, toolResultsSeen: 0, calls: 0 });
}

behaviourSuite("LangChain.js", async (script, tools, client, policy) => {
  const agent = createAgent({
    model: scriptedChatModel(script),
    tools: langchainTools(tools),
    systemPrompt: "You research Kafka.",
    // a failing tool as LangChain's idiom has it: an error ToolMessage, inside stallwatch's view
    middleware: [
      stallwatchMiddleware({ client, tools: s.DECLARED, policy }),
      toolErrorMiddleware({ onError: (error) => String(error) }),
    ],
  });
  const out = await agent.invoke(
    { messages: [{ role: "user", content: "How does Kafka compact a topic?" }] },
    { recursionLimit: 200 },
  );
  return out.messages.at(-1)!.text;
});
