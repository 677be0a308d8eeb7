/**
 * OpenAI Agents JS (`@openai/agents`): tool guardrails judge each call, the run's hooks mark
 * its rounds.
 *
 *   const result = await stallwatch().run(agent, "question");
 *
 * One stallwatch run per `run()`, on a copy of the agent (the original is left as it was). Each
 * function tool gets stallwatch's input guardrail (a refusal is rejected content in stallwatch's
 * words) and output guardrail (the result's fingerprint), and is disabled after a stop. Nudges and
 * the stop's words reach the next model call through `callModelInputFilter`; a stop that ends
 * the turn makes the stop's words the final output through `toolUseBehavior`. A round is one
 * model call and the function calls in its response.
 *
 * A tool's failure is seen when the SDK's default error text comes back (a tool made with
 * `tool()` without its own `errorFunction`); with its own `errorFunction` its text counts as a
 * result, and with `errorFunction: null` the exception ends the run (and `run()` the stallwatch run).
 */
import {
  type Agent,
  type FunctionTool,
  type NonStreamRunOptions,
  type RunContext,
  type Tool,
  ToolGuardrailFunctionOutputFactory,
  defineToolInputGuardrail,
  defineToolOutputGuardrail,
  run as runAgent,
} from "@openai/agents";

import type { StopView } from "../client.js";
import { Guard, type GuardOptions, type ModelTurn, instructionsText, refusalText } from "../guard.js";

export { Guard, type GuardOptions } from "../guard.js";
export { StallwatchClient } from "../client.js";

// What `tool()` returns to the model when a tool throws and it has no `errorFunction` of its own.
const SDK_FAILURE_TEXT = "An error occurred while running the tool. Please try again.";

type AnyAgent = Agent<any, any>;
type RunOptions = NonStreamRunOptions<any, AnyAgent>;
type ModelData = { input: unknown[]; instructions?: string };
type FilterArgs = { modelData: ModelData; agent: AnyAgent; context: unknown };
type ToolResults = { tool: { name: string }; output: unknown }[];
type FinalOutput = { isFinalOutput: boolean; isInterrupted?: undefined; finalOutput?: string };

export function stallwatch(options: GuardOptions = {}): StallwatchRun {
  return new StallwatchRun(options);
}

/** One stallwatch run for one agent run: make a new one per run. */
export class StallwatchRun {
  readonly guard: Guard;
  private toolNames: string[] = [];
  private callIds = new Map<string, string>(); // the SDK's call id -> stallwatch's
  private turn: Promise<ModelTurn> | null = null; // the coming model call's, once prepared
  private notes: string[] = [];
  private used = false;

  constructor(options: GuardOptions = {}) {
    this.guard = new Guard(options, "openai-agents");
  }

  /** The stop that ended the run (also after it ended), or null. */
  get stop(): StopView | null {
    return this.guard.stop;
  }

  /** `run()` of the guarded agent; the stallwatch run is ended however the SDK's run ends.
   * The caller's own `callModelInputFilter` runs before stallwatch's. */
  async run<A extends AnyAgent>(agent: A, input: Parameters<typeof runAgent>[1], options: RunOptions = {}) {
    const guarded = this.agent(agent);
    const own = options.callModelInputFilter;
    const filter = async (args: FilterArgs) => this.filter({ ...args, modelData: own ? await own(args as never) : args.modelData });
    try {
      return await runAgent(guarded, input, { ...options, stream: false, callModelInputFilter: filter as never });
    } finally {
      await this.guard.finish(this.guard.stop ? "stopped" : "ended");
    }
  }

  /** A copy of `agent` guarded for this run. Its function tools are guarded; the tools of agents
   * it hands off to are not. */
  agent<A extends AnyAgent>(agent: A): A {
    if (this.used) throw new Error("a StallwatchRun serves one run: make a new one for the next");
    this.used = true;
    const tools = agent.tools.map((t: Tool) => (t.type === "function" ? this.guarded(t) : t));
    this.toolNames = tools.filter((t: Tool) => t.type === "function").map((t: Tool) => t.name);
    const behaviour = agent.toolUseBehavior;
    if (behaviour !== "run_llm_again" && typeof behaviour !== "function") {
      return agent.clone({ tools }) as A; // the agent's own rule ends its turns
    }
    const toolUseBehavior = async (context: RunContext, results: ToolResults): Promise<FinalOutput> => {
      await this.guard.endRound(); // every call of the round is refused or reported
      const stop = this.guard.stop;
      if (stop?.action === "end_turn") return { isFinalOutput: true, isInterrupted: undefined, finalOutput: stop.reason };
      if (typeof behaviour === "function") return (await behaviour(context, results as never)) as FinalOutput;
      return { isFinalOutput: false, isInterrupted: undefined };
    };
    return agent.clone({ tools, toolUseBehavior: toolUseBehavior as never }) as A;
  }

  /** Once per model call, before its tools are chosen: close the open round, open this one. */
  private prepareTurn(): Promise<ModelTurn> {
    this.turn ??= this.guard.beginModelCall(this.toolNames).then((turn) => {
      this.notes = turn.notes;
      return turn;
    });
    return this.turn;
  }

  /** Right before the model is called: the rules and this call's words in its instructions. */
  private async filter({ modelData }: FilterArgs): Promise<ModelData> {
    await this.prepareTurn();
    this.turn = null; // the next tool check belongs to the next model call
    const instructions = instructionsText(modelData.instructions, this.guard.rules(), this.notes);
    return instructions === undefined ? modelData : { ...modelData, instructions };
  }

  private guarded(tool: FunctionTool<any, any, any>): FunctionTool<any, any, any> {
    const enabled = tool.isEnabled;
    const input = defineToolInputGuardrail({
      name: "stallwatch",
      run: async ({ toolCall }) => {
        const decision = await this.guard.propose(toolCall.name, parsed(toolCall.arguments));
        if (decision.allowed) {
          this.callIds.set(toolCall.callId, decision.callId);
          return ToolGuardrailFunctionOutputFactory.allow();
        }
        return ToolGuardrailFunctionOutputFactory.rejectContent(refusalText(decision), { code: decision.code });
      },
    });
    const output = defineToolOutputGuardrail({
      name: "stallwatch",
      run: async ({ toolCall, output: result }) => {
        const callId = this.callIds.get(toolCall.callId);
        if (callId !== undefined) {
          this.callIds.delete(toolCall.callId);
          const failed = result === SDK_FAILURE_TEXT;
          await this.guard.report(callId, toolCall.name, !failed, result);
        }
        return ToolGuardrailFunctionOutputFactory.allow();
      },
    });
    return {
      ...tool,
      isEnabled: async (context: RunContext, agent: AnyAgent) => {
        const turn = await this.prepareTurn();
        return turn.toolsAllowed && (await enabled(context, agent)); // after a stop: answer from what you have
      },
      inputGuardrails: [...(tool.inputGuardrails ?? []), input],
      outputGuardrails: [...(tool.outputGuardrails ?? []), output],
    };
  }
}

function parsed(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return args; // not JSON: judged as the text it is
  }
}
