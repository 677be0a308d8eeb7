/**
 * A client of `stallwatch serve`'s HTTP API: start a run, propose each call, report its result,
 * mark rounds, end the run. It fails open: while the server is away every call is allowed, and
 * the warning says so once per outage.
 */
import type { components } from "./openapi.js";

type Schemas = components["schemas"];
export type ToolSpec = Schemas["ToolSpec"];
export type StopView = Schemas["StopView"];
export type CallVerdict = Schemas["CallVerdict"];
export type RunView = Schemas["RunView"];
export type Effect = NonNullable<Schemas["ProposeCall"]["effect"]>;
export type Status = NonNullable<Schemas["ReportResult"]["status"]>;

export interface ClientOptions {
  /** Where `stallwatch serve` listens (default `http://127.0.0.1:8737`). */
  baseUrl?: string;
  /** `STALLWATCH_SERVE_TOKEN` of a server that needs one, sent as `Authorization: Bearer`. */
  token?: string;
  /** How long to wait for any answer before failing open (default 2000 ms). */
  verdictTimeoutMs?: number;
  /** Where the one line per outage goes (default `console.warn`). */
  warn?: (message: string) => void;
  /** The `fetch` to use (default the platform's). */
  fetch?: typeof fetch;
}

export interface StartOptions {
  mode?: string;
  /** Contract tool entries: `{name, repeat_exempt, volatile_fields, facts, effect}`. */
  tools?: ToolSpec[];
  policy?: Record<string, unknown>;
  parentRunId?: string;
  tenant?: string;
}

/** What the runtime does with a proposed call. */
export interface CallDecision {
  callId: string;
  allowed: boolean;
  code: string | null;
  /** Words for the model when refused. */
  reason: string;
  /** No verdict (the server away, or too slow): allowed, failing open. */
  timedOut: boolean;
}

/** A refusal of the caller's own request (a bad body, a wrong token): never failed open. */
export class StallwatchRequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "StallwatchRequestError";
  }
}

/** The server could not answer (unreachable, too slow, or failing itself). */
class Away extends Error {}

const DEFAULT_URL = "http://127.0.0.1:8737";

export class StallwatchClient {
  readonly baseUrl: string;
  readonly verdictTimeoutMs: number;
  private readonly token: string | undefined;
  private readonly warn: (message: string) => void;
  private readonly fetch: typeof fetch;
  private away = false; // set once per outage, so the warning is given once

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? DEFAULT_URL).replace(/\/+$/, "");
    this.verdictTimeoutMs = options.verdictTimeoutMs ?? 2000;
    this.token = options.token;
    this.warn = options.warn ?? ((message) => console.warn(message));
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** Start a run. With the server away the run is started again at its next call. */
  async startRun(runId: string, options: StartOptions = {}): Promise<Run> {
    const run = new Run(this, runId, options);
    await run.ensureStarted();
    return run;
  }

  /** True while the server is away (calls are allowed unjudged). */
  get failingOpen(): boolean {
    return this.away;
  }

  /** POST a JSON body; the answer, or `Away` when the server cannot give one in time. */
  async post<T>(path: string, body: unknown): Promise<T> {
    const headers: Record<string, string> = { "Content-Type": "application/json" };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    let response: Response;
    try {
      response = await this.fetch(`${this.baseUrl}${path}`, {
        method: "POST",
        headers,
        body: JSON.stringify(body ?? {}),
        signal: AbortSignal.timeout(this.verdictTimeoutMs),
      });
    } catch (error) {
      throw this.wentAway(describe(error));
    }
    if (response.status >= 500) {
      await response.body?.cancel();
      throw this.wentAway(`HTTP ${response.status}`);
    }
    let answer: unknown;
    try {
      answer = await response.json();
    } catch (error) {
      throw this.wentAway(`an unreadable answer (${describe(error)})`);
    }
    this.cameBack();
    if (!response.ok) {
      const error = (answer as { error?: unknown } | null)?.error;
      throw new StallwatchRequestError(response.status, typeof error === "string" ? error : `HTTP ${response.status}`);
    }
    return answer as T;
  }

  private wentAway(why: string): Away {
    if (!this.away) {
      this.away = true;
      this.warn(`stallwatch: ${this.baseUrl} cannot be reached (${why}); calls are allowed until it answers again`);
    }
    return new Away(why);
  }

  private cameBack(): void {
    if (this.away) {
      this.away = false;
      this.warn(`stallwatch: ${this.baseUrl} answers again; calls are judged`);
    }
  }
}

/** One agent run. Calls may be proposed concurrently; the server orders them per run. */
export class Run {
  /** Text to append to the model's system prompt ("" until the server has answered once). */
  systemPrompt = "";
  /** The run's stop once stallwatch has sent one: its words for the model and its action. */
  stop: StopView | null = null;
  round = 0;
  private started = false;
  private starting: Promise<void> | null = null;
  private unread: string[] = [];
  private calls = 0;

  constructor(
    private readonly client: StallwatchClient,
    readonly runId: string,
    private readonly options: StartOptions,
  ) {}

  private path(suffix: string): string {
    return `/v1/runs/${encodeURIComponent(this.runId)}${suffix}`;
  }

  /** POST /v1/runs once; while the server is away, again at each later call. */
  async ensureStarted(): Promise<boolean> {
    if (this.started) return true;
    this.starting ??= this.start().finally(() => {
      this.starting = null;
    });
    await this.starting;
    return this.started;
  }

  private async start(): Promise<void> {
    const o = this.options;
    const body = {
      run_id: this.runId,
      mode: o.mode ?? "researcher",
      tools: o.tools ?? [],
      policy: o.policy ?? null,
      parent_run_id: o.parentRunId ?? null,
      tenant: o.tenant ?? null,
    };
    try {
      const started = await this.client.post<Schemas["RunStarted"]>("/v1/runs", body);
      this.systemPrompt = started.system_prompt;
      this.started = true;
    } catch (error) {
      if (error instanceof StallwatchRequestError && error.status === 409) {
        this.started = true; // started by an earlier attempt whose answer was lost
        return;
      }
      if (!(error instanceof Away)) throw error;
    }
  }

  /** Nudges received since the last call of this method: words for the model's next call. */
  takeNudges(): string[] {
    const nudges = this.unread;
    this.unread = [];
    return nudges;
  }

  private see(view: RunView): RunView {
    this.round = view.round;
    this.stop ??= view.stop ?? null;
    if (view.nudges?.length) this.unread.push(...view.nudges);
    return view;
  }

  /** POST to one of the run's paths; null when the server is away or has forgotten the run. */
  private async send(suffix: string, body: unknown): Promise<RunView | null> {
    if (!(await this.ensureStarted())) return null;
    try {
      return this.see(await this.client.post<RunView>(this.path(suffix), body));
    } catch (error) {
      return this.failedOpen(error);
    }
  }

  private failedOpen(error: unknown): null {
    if (error instanceof Away) return null;
    if (error instanceof StallwatchRequestError && error.status === 404) {
      this.started = false; // a restarted server: the run starts again at its next call
      return null;
    }
    throw error;
  }

  async startRound(): Promise<void> {
    await this.send("/rounds", {});
  }

  async endRound(): Promise<void> {
    await this.send("/rounds/end", {});
  }

  /** Ask before running a call. Fails open: allowed, `timedOut`, when no verdict comes in time. */
  async propose(tool: string, args: unknown, options: { callId?: string; effect?: Effect } = {}): Promise<CallDecision> {
    this.calls += 1;
    const callId = options.callId ?? `call-${this.calls}`;
    if (await this.ensureStarted()) {
      const body = { tool, args: args ?? null, call_id: callId, effect: options.effect ?? null };
      try {
        const verdict = await this.client.post<CallVerdict>(this.path("/calls"), body);
        this.stop ??= verdict.stop ?? null;
        return {
          callId: verdict.call_id,
          allowed: verdict.allowed,
          code: verdict.code,
          reason: verdict.reason,
          timedOut: verdict.timed_out ?? false,
        };
      } catch (error) {
        this.failedOpen(error);
      }
    }
    return { callId, allowed: true, code: null, reason: "stallwatch cannot be reached; the call is allowed.", timedOut: true };
  }

  /** Report a call's result. The server keeps only its fingerprint unless `sendContent`. */
  async result(
    callId: string,
    tool: string,
    options: { status?: Status; result?: unknown; sendContent?: boolean } = {},
  ): Promise<void> {
    await this.send("/results", {
      call_id: callId,
      tool,
      status: options.status ?? "ok",
      result: options.result ?? null,
      send_content: options.sendContent ?? false,
    });
  }

  /** End the run; the server forgets it. */
  async end(reason?: string): Promise<void> {
    if (!this.started) return; // never reached the server: nothing to end
    await this.send("/end", { reason: reason ?? null });
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    const code = cause instanceof Error ? ((cause as { code?: string }).code ?? cause.message) : undefined;
    return code ? `${error.name}: ${code}` : `${error.name}: ${error.message}`;
  }
  return String(error);
}
