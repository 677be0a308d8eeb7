/** What the scripted models of every runtime do, and the tools they call: runtime-free. */
import assert from "node:assert/strict";

import type { Words } from "./harness.js";

export const ANSWER = "Kafka keeps the latest value per key by compacting its log.";
/** The declarations every adapter test passes: the wait is its protocol, never a repeat. */
export const DECLARED = [{ name: "wait_for_researchers", repeat_exempt: true }];

/** What the model was given at one call. */
export interface Seen {
  tools: string[];
  instructions: string;
  /** The tool results since its previous call, as text. */
  toolTexts: string[];
}

export type Call = [string, Record<string, unknown>];

/** A model that makes its planned calls while it has tools, then answers. A turn is one call, or
 * a list of calls made together (parallel tool calls). */
export class Script {
  readonly seen: Seen[] = [];
  constructor(readonly calls: (Call | Call[])[]) {}

  /** The calls to make now, or null to answer. */
  next(seen: Seen): Call[] | null {
    this.seen.push(seen);
    const turn = this.seen.length - 1;
    if (seen.tools.length === 0 || turn >= this.calls.length) return null;
    const planned = this.calls[turn]!;
    return Array.isArray(planned[0]) ? (planned as Call[]) : [planned as Call];
  }

  get toolTexts(): string[] {
    return this.seen.flatMap((s) => s.toolTexts);
  }
}

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => i + from);

export const scripts = {
  /** Rewords one search; every wording gets the same documents back. */
  rewording: (n = 20) =>
    new Script(range(n).map((i): Call => ["search", { q: `how does kafka compact a topic (wording ${i})` }])),
  /** Asks the very same search twice, then answers. */
  repeating: () => new Script([["search", { q: "kafka compaction" }], ["search", { q: "kafka compaction" }]]),
  /** Asks the very same search twice in one response, then answers. */
  parallelRepeat: () => new Script([[["search", { q: "kafka compaction" }], ["search", { q: "kafka compaction" }]]]),
  /** Reads one page after another; each page brings new documents. */
  paging: (pages = 12) => new Script(range(pages, 1).map((p): Call => ["list_page", { page: p }])),
  /** Fetches one address after another; every fetch fails. */
  failing: (n = 10) => new Script(range(n).map((i): Call => ["fetch", { url: `https://example.org/${i}` }])),
  /** A lead that waits for its researchers again and again with the same arguments. */
  waiting: (times = 8) => new Script(range(times).map((): Call => ["wait_for_researchers", {}])),
};

export class FetchFailed extends Error {}

/** The tools' behaviour and how often each ran. */
export class Tools {
  readonly ran = new Map<string, number>();

  /** `searchMs`: how long each search takes (a slow tool, for a time limit to pass during it). */
  constructor(private readonly searchMs = 0) {}

  count(name: string): number {
    return this.ran.get(name) ?? 0;
  }

  private tick(name: string): void {
    this.ran.set(name, this.count(name) + 1);
  }

  async search(_args: { q: string }): Promise<string> {
    this.tick("search");
    if (this.searchMs > 0) await new Promise((done) => setTimeout(done, this.searchMs));
    return JSON.stringify({
      documents: [
        { id: "kafka-docs", title: "Log compaction" },
        { id: "faust-docs", title: "Tables" },
      ],
    });
  }

  list_page(args: { page: number }): string {
    this.tick("list_page");
    return JSON.stringify({ page: args.page, documents: range(3).map((i) => ({ id: `doc-${args.page}-${i}` })) });
  }

  /** Fails every time: each runtime's adapter turns this into its failure idiom. */
  fetch(args: { url: string }): string {
    this.tick("fetch");
    throw new FetchFailed(`${args.url} did not answer`);
  }

  wait_for_researchers(_args: Record<string, never>): string {
    this.tick("wait_for_researchers");
    return "2 of 3 researchers still running";
  }

}

export const TOOL_NAMES = ["search", "list_page", "fetch", "wait_for_researchers"] as const;

/** The run's time is up before its first search (600 ms) has answered: the stop ends the turn. */
export const OUT_OF_TIME = { time_limit_s: 0.3 };
export const SLOW_SEARCH_MS = 600;

// What every adapter must make of each script (the runtime's final answer passed in).

/** Six searches ran (one new result, five already seen), the model was nudged at the third
 * already-seen round, then called without tools and told why, and answered. */
export function assertStoppedThenAnswered(words: Words, script: Script, tools: Tools, answer: string): void {
  assert.equal(tools.count("search"), 6);
  assert.ok(script.seen.some((s) => s.instructions.includes(words.nudge3)), "the nudge reached a model call");
  const last = script.seen.at(-1)!;
  assert.deepEqual(last.tools, []);
  assert.ok(last.instructions.includes(words.stopNoNewFacts), "the stop's words reached the last model call");
  assert.ok(script.seen.slice(0, -1).every((s) => s.tools.length > 0));
  assert.equal(answer, ANSWER);
}

export function assertFailuresStopped(words: Words, script: Script, tools: Tools, answer: string): void {
  assert.equal(tools.count("fetch"), 5);
  const last = script.seen.at(-1)!;
  assert.deepEqual(last.tools, []);
  assert.ok(last.instructions.includes(words.stopFailures), "the stop's words reached the last model call");
  assert.equal(answer, ANSWER);
}

export function assertRepeatRefused(words: Words, script: Script, tools: Tools, answer: string): void {
  assert.equal(tools.count("search"), 1);
  assert.ok(
    script.toolTexts.some((t) => t.includes(words.duplicateSearch)),
    `the refusal's words reached the model: ${JSON.stringify(script.toolTexts)}`,
  );
  assert.equal(answer, ANSWER);
}

/** Every call ran, the model always had its tools, and stallwatch said nothing. */
export function assertUntouched(script: Script, tools: Tools, tool: string, times: number, answer: string): void {
  assert.equal(tools.count(tool), times);
  assert.ok(script.seen.every((s) => s.tools.length > 0));
  assert.ok(!script.toolTexts.some((t) => t.includes("stallwatch:")));
  assert.ok(!script.seen.some((s) => s.instructions.includes("stallwatch:")));
  assert.equal(answer, ANSWER);
}
