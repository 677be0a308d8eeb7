// The Claude Agent SDK guarded by stallwatch: its hooks go to `stallwatch serve`'s /hooks/claude
// (STALLWATCH_SERVE_URL). Offline when ANTHROPIC_BASE_URL points at a scripted model (the test
// runs it against one that greps the same file again and again).
import { query } from "@anthropic-ai/claude-agent-sdk";
import { stallwatchHooks } from "@stallwatch/client/claude-agent-sdk";

const messages = query({
  prompt: "Find foo in notes.txt.",
  options: { allowedTools: ["Bash", "Read"], hooks: stallwatchHooks({ baseUrl: process.env.STALLWATCH_SERVE_URL }) },
});
for await (const message of messages) {
  if (message.type === "result") console.log(JSON.stringify({ subtype: message.subtype, result: message.result ?? null }));
}
