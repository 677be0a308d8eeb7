/**
 * Mastra (`@mastra/core`): stallwatch as the execution options of one `agent.generate` /
 * `agent.stream` call.
 *
 *   const result = await agent.generate("question", { ...stallwatch() });
 *
 * A round per step (model call); `hooks.beforeToolCall` proposes each call and refuses it with
 * `{ proceed: false, output }`, the output being stallwatch's words; `afterToolCall` reports its
 * result; nudges and the stop's words go into the next step's system messages through
 * `prepareStep`, which also removes the tools after a stop, and a stop that ends the turn aborts
 * the step (Mastra's tripwire: `result.tripwire.reason` is the stop's words). The run ends in
 * `onFinish` (or `onError`, `onAbort`). Your own tool hooks, passed as `hooks`, run after
 * stallwatch's (per-call hooks replace the agent's hooks of the same name in Mastra).
 */
import type { ToolHooks } from "@mastra/core/tools";

import { Guard, type GuardOptions, instructionsText, jsonable, refusalText } from "../guard.js";

export { Guard, type GuardOptions } from "../guard.js";
export { StallwatchClient } from "../client.js";

export interface MastraOptions extends GuardOptions {
  /** Your own tool hooks, run after stallwatch's. */
  hooks?: ToolHooks;
}

type SystemMessage = { role: "system"; content: string };
type StepArgs = { systemMessages: unknown[]; abort: (reason?: string) => never };
type StepResult = { systemMessages?: never[]; activeTools?: string[]; toolChoice?: "none" } | undefined;

/** The options to spread into one `generate` / `stream` call: one stallwatch run. */
export interface StallwatchOptions {
  hooks: Required<ToolHooks>;
  prepareStep: (args: StepArgs) => Promise<StepResult>;
  onFinish: () => Promise<void>;
  onError: () => Promise<void>;
  onAbort: () => Promise<void>;
  /** The run behind these options (not spread: read `guard.stop` after the call). */
  readonly guard: Guard;
}

export function stallwatch(options: MastraOptions = {}): StallwatchOptions {
  const guard = new Guard(options, "mastra");
  const own = options.hooks ?? {};
  const callIds = new WeakMap<object, string>(); // a call's execution context -> stallwatch's call id

  const hooks: Required<ToolHooks> = {
    beforeToolCall: async (call) => {
      const decision = await guard.propose(call.toolName, jsonable(call.input));
      if (!decision.allowed) return { proceed: false, output: refusalText(decision) };
      if (typeof call.context === "object" && call.context !== null) callIds.set(call.context, decision.callId);
      return own.beforeToolCall?.(call);
    },
    afterToolCall: async (call) => {
      const callId = typeof call.context === "object" && call.context !== null ? callIds.get(call.context) : undefined;
      if (callId !== undefined) {
        callIds.delete(call.context as object);
        const failed = call.error !== undefined;
        await guard.report(callId, call.toolName, !failed, failed ? null : call.output);
      }
      await own.afterToolCall?.(call);
    },
  };

  const prepareStep = async ({ systemMessages, abort }: StepArgs): Promise<StepResult> => {
    const turn = await guard.beginModelCall();
    if (turn.endingStop) abort(turn.endingStop.reason); // the model is not called again
    const extra = instructionsText(undefined, guard.rules(), turn.notes);
    const step: NonNullable<StepResult> = {};
    if (extra !== undefined) {
      const ours: SystemMessage = { role: "system", content: extra };
      step.systemMessages = [...systemMessages, ours] as never[];
    }
    if (!turn.toolsAllowed) Object.assign(step, { activeTools: [], toolChoice: "none" });
    return step;
  };

  const settings: Omit<StallwatchOptions, "guard"> = {
    hooks,
    prepareStep,
    onFinish: () => guard.finish(guard.stop ? "stopped" : "answered"),
    onError: () => guard.finish("raised"),
    onAbort: () => guard.finish("aborted"),
  };
  Object.defineProperty(settings, "guard", { value: guard, enumerable: false });
  return settings as StallwatchOptions;
}
