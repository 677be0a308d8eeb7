/**
 * What every framework adapter does with a run: rounds, proposals, results, nudges and the stop.
 *
 * A round is one model call plus the tool calls in its response: it opens when the model is
 * called and closes when the next model call begins, or when the run finishes.
 */
import { type CallDecision, type Run, StallwatchClient, type StopView, type ToolSpec } from "./client.js";

export interface GuardOptions {
  /** The client of `stallwatch serve` (default: one for `http://127.0.0.1:8737`). */
  client?: StallwatchClient;
  /** `researcher` (default), `coder` or `chat`. */
  mode?: string;
  /**
   * Tools that declare something, by name: `{name: "wait", repeat_exempt: true}`,
   * `volatile_fields`, `facts`. Every other tool is listed by name only.
   */
  tools?: ToolSpec[];
  policy?: Record<string, unknown>;
  tenant?: string;
  /** Prefix of the run ids this adapter makes (default the runtime's name). */
  runIdPrefix?: string;
  /** Append the run's rules to the model's instructions (default true). */
  tellRules?: boolean;
}

/** What the next model call may do, and the words it gets from stallwatch. */
export interface ModelTurn {
  stop: StopView | null;
  /** Nudges, then the stop's reason. */
  notes: string[];
  /** False after a stop: the model is called without tools. */
  toolsAllowed: boolean;
  /** The stop when it ends the turn (`end_turn`): the model is not called again. */
  endingStop: StopView | null;
}

const UNGUARDED = "unguarded-"; // the call id of a call stallwatch failed to judge

/** One agent run seen through a framework's hooks. */
export class Guard {
  readonly client: StallwatchClient;
  readonly runId: string;
  private run: Run | null = null;
  private starting: Promise<Run | null> | null = null;
  private roundOpen = false;
  private finished = false;
  private unguardedCalls = 0;

  constructor(private readonly options: GuardOptions, prefix: string) {
    this.client = options.client ?? new StallwatchClient();
    this.runId = `${options.runIdPrefix ?? prefix}-${randomHex(16)}`;
  }

  get stop(): StopView | null {
    return this.run?.stop ?? null;
  }

  /** The run's rules for the model's instructions ("" before the run starts or when off). */
  rules(): string {
    return this.options.tellRules === false ? "" : (this.run?.systemPrompt ?? "");
  }

  /** Start the run once (its tools listed by name); a failure leaves it unstarted, logged. */
  async start(toolNames: Iterable<string> = []): Promise<Run | null> {
    if (this.run) return this.run;
    this.starting ??= this.client
      .startRun(this.runId, {
        mode: this.options.mode,
        tools: toolEntries(this.options.tools ?? [], toolNames),
        policy: this.options.policy,
        tenant: this.options.tenant,
      })
      .then(
        (run) => (this.run = run),
        (error) => unguarded("starting the run", error),
      )
      .finally(() => {
        this.starting = null;
      });
    return this.starting;
  }

  /** Before a model call: close the open round, then open this call's round unless stopped. */
  async beginModelCall(toolNames: Iterable<string> = []): Promise<ModelTurn> {
    const run = await this.start(toolNames);
    await this.endRound();
    if (!run) return turn(null, []);
    const notes = run.takeNudges();
    if (run.stop) return turn(run.stop, [...notes, run.stop.reason]);
    try {
      await run.startRound();
      this.roundOpen = true;
    } catch (error) {
      unguarded("starting a round", error);
    }
    // a stop may arrive with the round's answer (a time limit): this call already sees it
    const late = run.stop as StopView | null;
    if (late) return turn(late, [...notes, ...run.takeNudges(), late.reason]);
    return turn(null, notes);
  }

  async endRound(): Promise<void> {
    if (!this.roundOpen || !this.run) return;
    this.roundOpen = false;
    try {
      await this.run.endRound();
    } catch (error) {
      unguarded("ending a round", error);
    }
  }

  /** Ask before a call runs. Any fault of stallwatch's lets this one call run, with a log line. */
  async propose(tool: string, args: unknown): Promise<CallDecision> {
    const run = await this.start([tool]);
    if (run) {
      try {
        return await run.propose(tool, args);
      } catch (error) {
        unguarded("judging a call", error);
      }
    }
    this.unguardedCalls += 1;
    return {
      callId: `${UNGUARDED}${this.unguardedCalls}`,
      allowed: true,
      code: null,
      reason: "stallwatch failed while judging this call; it runs unguarded.",
      timedOut: true,
    };
  }

  /** A call's result; the server keeps only its fingerprint. */
  async report(callId: string, tool: string, ok: boolean, result: unknown): Promise<void> {
    if (!this.run || callId.startsWith(UNGUARDED)) return;
    try {
      await this.run.result(callId, tool, { status: ok ? "ok" : "error", result: jsonable(result) });
    } catch (error) {
      unguarded("reporting a result", error);
    }
  }

  /** Close the open round and end the run. Idempotent. */
  async finish(reason?: string): Promise<void> {
    if (this.finished || !this.run) return;
    this.finished = true;
    await this.endRound();
    try {
      await this.run.end(reason);
    } catch (error) {
      unguarded("ending the run", error);
    }
  }
}

function turn(stop: StopView | null, notes: string[]): ModelTurn {
  return {
    stop,
    notes,
    toolsAllowed: stop === null,
    endingStop: stop !== null && stop.action === "end_turn" ? stop : null,
  };
}

function toolEntries(declared: ToolSpec[], names: Iterable<string>): ToolSpec[] {
  const known = new Set(declared.map((t) => t.name));
  const rest = [...new Set(names)].filter((n) => !known.has(n)).map((name) => ({ name }));
  return [...declared, ...rest];
}

/** What the model sees in place of a refused call's result. */
export function refusalText(decision: CallDecision): string {
  return `stallwatch: ${decision.reason}`;
}

/** The model's instructions with the run's rules and this call's words appended. */
export function instructionsText(base: string | undefined, rules: string, notes: string[]): string | undefined {
  const extra = [...(rules ? [rules] : []), ...notes.map((n) => `stallwatch: ${n}`)];
  if (extra.length === 0) return base;
  return (base ? [base, ...extra] : extra).join("\n\n");
}

/** A value as JSON for fingerprinting; what JSON cannot hold becomes its string form. */
export function jsonable(value: unknown): unknown {
  if (value === undefined) return null;
  try {
    const text = JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
    return text === undefined ? String(value) : JSON.parse(text);
  } catch {
    return String(value); // a cycle: still hashes (as new)
  }
}

function unguarded(what: string, error: unknown): null {
  const why = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  console.warn(`stallwatch failed ${what} (${why}); the agent goes on unguarded there`);
  return null;
}

function randomHex(length: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(length / 2));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
