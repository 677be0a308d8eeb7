/**
 * The Claude Agent SDK (`@anthropic-ai/claude-agent-sdk`): stallwatch as the query's hooks.
 *
 *   for await (const message of query({ prompt, options: { hooks: stallwatchHooks() } })) { ... }
 *
 * The SDK drives Claude Code, whose hooks `stallwatch serve` already speaks: each hook's input
 * goes to serve's `/hooks/claude` endpoint and its answer comes back as the hook's output. A
 * session is a coder-mode run (the mode, tenant and policy are the server's: `stallwatch serve
 * --tenant --policy`); a round is one model response (the transcript's `message.id`); a repeated
 * read is denied in `PreToolUse` with stallwatch's words as `permissionDecisionReason`; nudges go
 * beside the result (`additionalContext`); a stop denies the call and ends the run
 * (`continue: false` with the stop's words as `stopReason`). With the server away every call is
 * allowed, and one warning per outage says so.
 */
import type { HookCallback, HookCallbackMatcher, HookEvent, HookJSONOutput } from "@anthropic-ai/claude-agent-sdk";

import type { ClientOptions } from "../client.js";

export { StallwatchClient } from "../client.js";

const EVENTS: HookEvent[] = ["PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionEnd"];

export type ClaudeHookOptions = Omit<ClientOptions, "verdictTimeoutMs"> & {
  /** How long a hook waits for serve before allowing the call (default 5000 ms: serve may wait
   * up to half a second for the call to appear in Claude Code's transcript). */
  timeoutMs?: number;
};

/** The hooks for `query({ options: { hooks } })`, forwarding to serve's `/hooks/claude`. */
export function stallwatchHooks(options: ClaudeHookOptions = {}): Partial<Record<HookEvent, HookCallbackMatcher[]>> {
  const url = `${(options.baseUrl ?? "http://127.0.0.1:8737").replace(/\/+$/, "")}/hooks/claude`;
  const warn = options.warn ?? ((message: string) => console.warn(message));
  const send = options.fetch ?? globalThis.fetch.bind(globalThis);
  let away = false; // set once per outage, so the warning is given once

  const hook: HookCallback = async (input) => {
    const headers: Record<string, string> = { "Content-Type": "application/json" };
    if (options.token) headers.Authorization = `Bearer ${options.token}`;
    try {
      const response = await send(url, {
        method: "POST",
        headers,
        body: JSON.stringify(input),
        signal: AbortSignal.timeout(options.timeoutMs ?? 5000),
      });
      if (!response.ok) throw new Error(`HTTP ${response.status}: ${(await response.text()).slice(0, 200)}`);
      const answer = (await response.json()) as HookJSONOutput;
      if (away) {
        away = false;
        warn(`stallwatch: ${url} answers again; calls are judged`);
      }
      return answer;
    } catch (error) {
      if (!away) {
        away = true;
        const why = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
        warn(`stallwatch: ${url} cannot be reached (${why}); calls are allowed until it answers again`);
      }
      return {}; // the call goes ahead, as with no hook
    }
  };
  return Object.fromEntries(EVENTS.map((event) => [event, [{ hooks: [hook] }]]));
}
