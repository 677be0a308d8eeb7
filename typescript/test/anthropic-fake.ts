/** A scripted model speaking the Anthropic Messages API (SSE), for Claude Code run offline.
 * Each request that offers tools gets the script's next reply: tool calls or a final text. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";

/** [tool, input] pairs for one response, or a string: the final answer. */
export type Reply = [string, Record<string, unknown>][] | string;
export type ToolResult = { id: string; text: string; isError: boolean };
export type Script = (turn: number, results: ToolResult[]) => Reply;

type Block = { type: string; text?: string; id?: string; name?: string; input?: unknown };

export class FakeAnthropic {
  readonly seen: { turn: number; toolResults: ToolResult[]; requestText: string }[] = [];
  private ids = 0;
  private server: Server | null = null;

  constructor(private readonly script: Script) {}

  async start(): Promise<string> {
    this.server = createServer((request, response) => void this.handle(request, response));
    await new Promise<void>((ok) => this.server!.listen(0, "127.0.0.1", ok));
    return `http://127.0.0.1:${(this.server.address() as { port: number }).port}`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((ok) => this.server?.close(ok));
  }

  private async handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString() || "{}");
    if (request.url?.startsWith("/v1/messages/count_tokens")) return json(response, { input_tokens: 10 });
    if (!request.url?.startsWith("/v1/messages")) return json(response, {}, 404);
    let reply: Reply = "ok"; // Claude Code's side requests (titles, summaries): a short text
    if (body.tools?.length) {
      const results = toolResults(body.messages ?? []);
      const turn = this.seen.length;
      this.seen.push({ turn, toolResults: results, requestText: JSON.stringify((body.messages ?? []).slice(-1)) });
      reply = this.script(turn, results);
    }
    const blocks: Block[] =
      typeof reply === "string"
        ? [{ type: "text", text: reply }]
        : reply.map(([name, input]) => ({ type: "tool_use", id: `toolu_fake${String(++this.ids).padStart(6, "0")}`, name, input }));
    const id = `msg_fake${String(++this.ids).padStart(6, "0")}`;
    const stopReason = typeof reply === "string" ? "end_turn" : "tool_use";
    const model = body.model ?? "fake";
    if (!body.stream) {
      return json(response, {
        id,
        type: "message",
        role: "assistant",
        model,
        content: blocks,
        stop_reason: stopReason,
        stop_sequence: null,
        usage: { input_tokens: 10, output_tokens: 10 },
      });
    }
    response.writeHead(200, { "Content-Type": "text/event-stream" });
    for (const event of events(id, model, blocks, stopReason)) {
      response.write(`event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
    }
    response.end();
  }
}

function json(response: ServerResponse, body: unknown, status = 200): void {
  response.writeHead(status, { "Content-Type": "application/json" });
  response.end(JSON.stringify(body));
}

function events(id: string, model: string, blocks: Block[], stopReason: string): { type: string; [k: string]: unknown }[] {
  const out: { type: string; [k: string]: unknown }[] = [
    {
      type: "message_start",
      message: { id, type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 } },
    },
  ];
  blocks.forEach((block, index) => {
    const start = block.type === "text" ? { type: "text", text: "" } : { ...block, input: {} };
    const delta =
      block.type === "text"
        ? { type: "text_delta", text: block.text }
        : { type: "input_json_delta", partial_json: JSON.stringify(block.input) };
    out.push(
      { type: "content_block_start", index, content_block: start },
      { type: "content_block_delta", index, delta },
      { type: "content_block_stop", index },
    );
  });
  out.push(
    { type: "message_delta", delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: 10 } },
    { type: "message_stop" },
  );
  return out;
}

/** The tool results in the request's last user message: what the last calls gave. */
function toolResults(messages: { role?: string; content?: unknown }[]): ToolResult[] {
  for (const message of [...messages].reverse()) {
    if (message.role !== "user" || !Array.isArray(message.content)) continue;
    const found: ToolResult[] = [];
    for (const block of message.content as { type?: string; content?: unknown; tool_use_id?: string; is_error?: boolean }[]) {
      if (block?.type !== "tool_result") continue;
      const content = Array.isArray(block.content)
        ? (block.content as { text?: string }[]).map((c) => c.text ?? "").join("")
        : String(block.content);
      found.push({ id: block.tool_use_id ?? "", text: content, isError: Boolean(block.is_error) });
    }
    return found;
  }
  return [];
}
