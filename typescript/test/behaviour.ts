/** What every adapter promises, on each runtime driven by its own scripted model. */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { StallwatchClient } from "../src/client.js";
import { type Serve, capturingWarnings, engineWords, freePort, startServe, type Words } from "./harness.js";
import * as s from "./scripts.js";

/** Runs one agent invocation under stallwatch (`policy` passed to the adapter): the runtime's
 * final answer. */
export type RunAgent = (
  script: s.Script,
  tools: s.Tools,
  client: StallwatchClient,
  policy?: Record<string, unknown>,
) => Promise<string>;

/** `stopWordsLast`: the runtime can make the stop's words its final answer when the stop ends
 * the turn (the AI SDK cannot: its loop just ends, and `guard.stop` says why). */
export function behaviourSuite(runtime: string, runAgent: RunAgent, stopWordsLast = true): void {
  describe(`${runtime}: what every adapter promises`, () => {
    let serve: Serve;
    let words: Words;
    let client: StallwatchClient;
    before(async () => {
      words = engineWords();
      serve = await startServe();
      client = new StallwatchClient({ baseUrl: serve.url, verdictTimeoutMs: 30_000 });
    });
    after(() => serve?.stop());

    const run = async (script: s.Script) => {
      const tools = new s.Tools();
      const answer = await runAgent(script, tools, client);
      return { tools, answer };
    };

    test("a rewording model is stopped, then answers without tools", async () => {
      const script = s.scripts.rewording();
      const { tools, answer } = await run(script);
      s.assertStoppedThenAnswered(words, script, tools, answer);
    });

    test("a repeated call is refused with the words shown to the model", async () => {
      const script = s.scripts.repeating();
      const { tools, answer } = await run(script);
      s.assertRepeatRefused(words, script, tools, answer);
    });

    test("one of two identical parallel calls is refused", async () => {
      const script = s.scripts.parallelRepeat();
      const { tools, answer } = await run(script);
      s.assertRepeatRefused(words, script, tools, answer);
    });

    test("a paging model runs to the end untouched", async () => {
      const script = s.scripts.paging();
      const { tools, answer } = await run(script);
      s.assertUntouched(script, tools, "list_page", 12, answer);
    });

    test("a repeat-exempt wait is never refused", async () => {
      const script = s.scripts.waiting();
      const { tools, answer } = await run(script);
      s.assertUntouched(script, tools, "wait_for_researchers", 8, answer);
    });

    test("five failures of one tool stop the run", async () => {
      const script = s.scripts.failing();
      const { tools, answer } = await run(script);
      s.assertFailuresStopped(words, script, tools, answer);
    });

    test("a stop that ends the turn calls the model no more", async () => {
      const script = s.scripts.rewording();
      const tools = new s.Tools(s.SLOW_SEARCH_MS);
      const answer = await runAgent(script, tools, client, s.OUT_OF_TIME);
      // (on a loaded machine the time can be up before the search is even proposed: then it is
      // refused, and the turn ends all the same)
      assert.equal(script.seen.length, 1, "the model was called once");
      assert.ok(tools.count("search") <= 1);
      if (stopWordsLast) assert.equal(answer, words.stopTime, "the stop's words are the run's last words");
    });

    test("with the server away every call runs, and one warning says so", async () => {
      const away = new StallwatchClient({ baseUrl: `http://127.0.0.1:${await freePort()}`, verdictTimeoutMs: 5_000 });
      const script = s.scripts.repeating();
      const tools = new s.Tools();
      const { value: answer, warnings } = await capturingWarnings(() => runAgent(script, tools, away));
      assert.equal(tools.count("search"), 2, "both searches ran, unjudged");
      assert.equal(answer, s.ANSWER);
      assert.equal(warnings.length, 1, warnings.join("\n"));
      assert.match(warnings[0]!, /cannot be reached.*calls are allowed/);
    });
  });
}
