/**
 * The AI SDK (`ai`): stallwatch as the settings of one `generateText` / `streamText` call.
 *
 *   const result = await generateText({ model, tools, prompt, ...stallwatch({ stopWhen: isStepCount(20) }) });
 *
 * A round per step (model call); each tool call goes through `toolApproval`, a refusal is a
 * `denied` approval whose reason, stallwatch's words, the model reads; results are reported from
 * `onToolExecutionEnd`; nudges and the stop's words go into the next step's instructions through
 * `prepareStep`, which also removes the tools after a stop; a stop that ends the turn ends the
 * loop through `stopWhen`. The run ends in `onFinish` (or `onError`, `onAbort` when streaming).
 */
import type { Instructions, StopCondition, SystemModelMessage, ToolApprovalStatus } from "ai";

import { Guard, type GuardOptions, instructionsText, jsonable, refusalText } from "../guard.js";

export { Guard, type GuardOptions } from "../guard.js";
export { StallwatchClient } from "../client.js";

type Arrayable<T> = T | T[];
// The settings' callbacks take the least the SDK passes them, so they fit any call's tool set.
type AnyStop = StopCondition<any, any>;
type ToolCall = { toolCallId: string; toolName: string; input: unknown };
type StepSettings = { instructions?: Instructions; activeTools?: never[]; toolChoice?: "none" };

export interface AiOptions extends GuardOptions {
  /** Your stop conditions; stallwatch adds its own. Default: the AI SDK's (`isStepCount(1)`). */
  stopWhen?: Arrayable<AnyStop>;
}

/** The settings to spread into one `generateText` / `streamText` call: one stallwatch run. */
export interface StallwatchSettings {
  toolApproval: (options: { toolCall: ToolCall; tools?: object }) => Promise<ToolApprovalStatus>;
  prepareStep: (options: { initialInstructions?: Instructions }) => Promise<StepSettings>;
  onToolExecutionEnd: (event: { toolCall: ToolCall; toolOutput: { type: string; output?: unknown } }) => Promise<void>;
  stopWhen: AnyStop[];
  onFinish: () => Promise<void>;
  onError: () => Promise<void>;
  onAbort: () => Promise<void>;
  /** The run behind these settings (not spread: read `guard.stop` after the call). */
  readonly guard: Guard;
}

const DEFAULT_STOP: AnyStop = ({ steps }) => steps.length >= 1;

export function stallwatch(options: AiOptions = {}): StallwatchSettings {
  const guard = new Guard(options, "ai");
  const callIds = new Map<string, string>(); // the SDK's tool call id -> stallwatch's

  const toolApproval: StallwatchSettings["toolApproval"] = async ({ toolCall, tools }) => {
    await guard.start(Object.keys(tools ?? {}));
    const decision = await guard.propose(toolCall.toolName, jsonable(toolCall.input));
    if (!decision.allowed) return { type: "denied", reason: refusalText(decision) };
    callIds.set(toolCall.toolCallId, decision.callId);
    return "not-applicable";
  };

  const prepareStep: StallwatchSettings["prepareStep"] = async ({ initialInstructions }) => {
    const turn = await guard.beginModelCall();
    const extra = instructionsText(undefined, guard.rules(), turn.notes);
    const step: StepSettings = {};
    if (extra !== undefined) step.instructions = appended(initialInstructions, extra);
    if (!turn.toolsAllowed) Object.assign(step, { activeTools: [], toolChoice: "none" });
    return step;
  };

  const onToolExecutionEnd: StallwatchSettings["onToolExecutionEnd"] = async (event) => {
    const { toolCall, toolOutput } = event;
    const callId = callIds.get(toolCall.toolCallId);
    if (callId === undefined) return; // not proposed (a provider-executed tool)
    callIds.delete(toolCall.toolCallId);
    const ok = toolOutput.type === "tool-result";
    await guard.report(callId, toolCall.toolName, ok, ok ? toolOutput.output : null);
  };

  // After each step: close its round (its results are in), then end the loop on a stop that ends the turn.
  const endsTurn: AnyStop = async () => {
    await guard.endRound();
    return guard.stop?.action === "end_turn";
  };
  const own = options.stopWhen ?? DEFAULT_STOP;

  const finish = async () => guard.finish(guard.stop ? "stopped" : "answered");
  const settings: Omit<StallwatchSettings, "guard"> = {
    toolApproval,
    prepareStep,
    onToolExecutionEnd,
    stopWhen: [...(Array.isArray(own) ? own : [own]), endsTurn],
    onFinish: finish,
    onError: () => guard.finish("raised"),
    onAbort: () => guard.finish("aborted"),
  };
  Object.defineProperty(settings, "guard", { value: guard, enumerable: false });
  return settings as StallwatchSettings; // with `guard`, defined above
}

/** The call's own instructions with stallwatch's text after them. */
function appended(base: Instructions | undefined, extra: string): Instructions {
  if (base === undefined || base === "") return extra;
  if (typeof base === "string") return `${base}\n\n${extra}`;
  const ours: SystemModelMessage = { role: "system", content: extra };
  return [...(Array.isArray(base) ? base : [base]), ours];
}
