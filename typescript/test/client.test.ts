/** The client against a real `stallwatch serve`, and failing open without one. */
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { after, before, describe, test } from "node:test";

import { StallwatchClient, StallwatchRequestError } from "../src/index.js";
import { type Serve, engineWords, freePort, startServe, type Words } from "./harness.js";

describe("the client against a real serve", () => {
  let serve: Serve;
  let words: Words;
  before(async () => {
    words = engineWords();
    serve = await startServe();
  });
  after(() => serve?.stop());

  test("a run's calls: a repeat is refused in stallwatch's words", async () => {
    const client = new StallwatchClient({ baseUrl: serve.url });
    const run = await client.startRun("client-repeat", { tools: [{ name: "search" }] });
    assert.ok(run.systemPrompt.length > 0, "the rules for the model's system prompt");
    await run.startRound();
    const first = await run.propose("search", { q: "kafka" });
    assert.deepEqual([first.allowed, first.timedOut], [true, false]);
    await run.result(first.callId, "search", { result: { documents: ["a"] } });
    await run.endRound();
    await run.startRound();
    const again = await run.propose("search", { q: "kafka" });
    assert.equal(again.allowed, false);
    assert.ok(again.reason.includes(words.duplicateSearch), again.reason);
    assert.equal(run.round, 2);
    await run.end("answered");
    assert.equal(client.failingOpen, false);
  });

  test("a request the server refuses is an error, not failed open", async () => {
    const client = new StallwatchClient({ baseUrl: serve.url });
    await assert.rejects(client.startRun("client-bad-mode", { mode: "no-such-mode" }), (error: unknown) => {
      assert.ok(error instanceof StallwatchRequestError);
      assert.equal(error.status, 400);
      return true;
    });
  });

  test("a run the server has forgotten is started again at its next call", async () => {
    const client = new StallwatchClient({ baseUrl: serve.url });
    const run = await client.startRun("client-forgotten");
    await run.end();
    const decision = await run.propose("search", { q: "kafka" }); // 404: started again next time
    assert.deepEqual([decision.allowed, decision.timedOut], [true, true]);
    const next = await run.propose("search", { q: "kafka" });
    assert.deepEqual([next.allowed, next.timedOut], [true, false]);
    await run.end();
  });
});

describe("a server that wants a token", () => {
  const token = `s3cret-${"x".repeat(24)}`;
  let serve: Serve;
  before(async () => {
    serve = await startServe([], undefined, { STALLWATCH_SERVE_TOKEN: token });
  });
  after(() => serve?.stop());

  test("calls carry the token; a wrong one is an error, not failed open", async () => {
    const client = new StallwatchClient({ baseUrl: serve.url, token });
    const run = await client.startRun("client-token");
    assert.equal((await run.propose("search", { q: "k" })).timedOut, false);
    await run.end();
    const wrong = new StallwatchClient({ baseUrl: serve.url, token: "wrong" });
    await assert.rejects(wrong.startRun("client-wrong-token"), (error: unknown) => {
      assert.ok(error instanceof StallwatchRequestError);
      assert.equal(error.status, 401);
      assert.ok(!error.message.includes(token), "the token is never in an error");
      return true;
    });
  });
});

describe("failing open", () => {
  test("with the server away calls are allowed and one warning is given per outage", async () => {
    const warnings: string[] = [];
    const client = new StallwatchClient({
      baseUrl: `http://127.0.0.1:${await freePort()}`,
      warn: (message) => warnings.push(message),
    });
    const run = await client.startRun("away");
    for (let i = 0; i < 3; i++) {
      const decision = await run.propose("search", { q: "kafka" });
      assert.deepEqual([decision.allowed, decision.timedOut], [true, true]);
      await run.result(decision.callId, "search", { result: "x" });
    }
    await run.end();
    assert.equal(warnings.length, 1, warnings.join("\n"));
    assert.match(warnings[0]!, /cannot be reached \(.+\); calls are allowed until it answers again/);
  });

  test("a server that does not answer in time: the call is allowed after the verdict timeout", async () => {
    const held: ServerResponse[] = [];
    const server = createServer((_request: IncomingMessage, response: ServerResponse) => void held.push(response));
    await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
    const { port } = server.address() as { port: number };
    const warnings: string[] = [];
    try {
      const client = new StallwatchClient({
        baseUrl: `http://127.0.0.1:${port}`,
        verdictTimeoutMs: 200,
        warn: (message) => warnings.push(message),
      });
      const run = await client.startRun("silent");
      const decision = await run.propose("search", {});
      assert.deepEqual([decision.allowed, decision.timedOut], [true, true]);
      assert.equal(warnings.length, 1);
      assert.match(warnings[0]!, /TimeoutError/);
    } finally {
      for (const response of held) response.destroy();
      server.closeAllConnections();
      await new Promise((ok) => server.close(ok));
    }
  });

  test("the server coming back is said once, and calls are judged again", async () => {
    const port = await freePort();
    const warnings: string[] = [];
    const client = new StallwatchClient({ baseUrl: `http://127.0.0.1:${port}`, warn: (m) => warnings.push(m) });
    const run = await client.startRun("comeback", { tools: [{ name: "search" }] });
    assert.equal((await run.propose("search", { q: "k" })).timedOut, true);
    assert.equal(client.failingOpen, true);
    const serve = await startServe([], port);
    try {
      const first = await run.propose("search", { q: "k" }); // the run is started, then judged
      const again = await run.propose("search", { q: "k" });
      assert.deepEqual([first.timedOut, first.allowed], [false, true]);
      assert.deepEqual([again.timedOut, again.allowed], [false, false]);
      assert.equal(client.failingOpen, false);
      assert.equal(warnings.length, 2, warnings.join("\n"));
      assert.match(warnings[1]!, /answers again; calls are judged/);
    } finally {
      await serve.stop();
    }
  });
});

describe("hostile sizes", () => {
  let serve: Serve;
  before(async () => {
    serve = await startServe();
  });
  after(() => serve?.stop());

  test("arguments and a result of 1 MiB are judged, not failed open", async () => {
    const client = new StallwatchClient({ baseUrl: serve.url, verdictTimeoutMs: 30_000 });
    const run = await client.startRun("client-big", { tools: [{ name: "search" }] });
    const big = "x".repeat(1 << 20);
    const decision = await run.propose("search", { q: big });
    assert.deepEqual([decision.allowed, decision.timedOut], [true, false]);
    await run.result(decision.callId, "search", { result: { text: big } });
    const again = await run.propose("search", { q: big });
    assert.equal(again.allowed, false);
    await run.end();
    assert.equal(client.failingOpen, false);
  });
});
