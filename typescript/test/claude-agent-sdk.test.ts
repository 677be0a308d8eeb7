/** The Claude Agent SDK's hooks through a real `stallwatch serve`: the SDK runs its bundled Claude
 * Code offline against a scripted Anthropic API. A model looping on one grep is refused in
 * stallwatch's words and stopped; with the server away every call runs and one warning says so. */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { query, type SDKMessage } from "@anthropic-ai/claude-agent-sdk";

import { stallwatchHooks } from "../src/adapters/claude-agent-sdk.js";
import { FakeAnthropic, type Reply } from "./anthropic-fake.js";
import { capturingWarnings, freePort, type Serve, startServe } from "./harness.js";

const TURNS = 15;

function grepForever(turn: number): Reply {
  if (turn >= TURNS) return "Final answer: gave up.";
  return [["Bash", { command: "grep -n foo notes.txt", description: `look for foo (${turn})` }]];
}

async function runClaude(serveUrl: string): Promise<{ model: FakeAnthropic; messages: SDKMessage[] }> {
  const tmp = mkdtempSync(join(tmpdir(), "stallwatch-claude-"));
  const home = join(tmp, "home");
  const ws = join(tmp, "ws");
  mkdirSync(home);
  mkdirSync(ws);
  writeFileSync(join(ws, "notes.txt"), "foo is here\n");
  writeFileSync(
    join(home, ".claude.json"),
    JSON.stringify({ hasCompletedOnboarding: true, projects: { [ws]: { hasTrustDialogAccepted: true } } }),
  );
  const model = new FakeAnthropic(grepForever);
  const modelUrl = await model.start();
  const messages: SDKMessage[] = [];
  try {
    const session = query({
      prompt: "Find foo.",
      options: {
        cwd: ws,
        env: {
          PATH: process.env.PATH ?? "",
          HOME: home,
          TMPDIR: tmp,
          ANTHROPIC_BASE_URL: modelUrl,
          ANTHROPIC_API_KEY: "sk-fake",
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
          DISABLE_TELEMETRY: "1",
          DISABLE_AUTOUPDATER: "1",
          DISABLE_ERROR_REPORTING: "1",
        },
        allowedTools: ["Bash", "Read"],
        hooks: stallwatchHooks({ baseUrl: serveUrl }),
      },
    });
    for await (const message of session) messages.push(message);
  } finally {
    await model.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
  assert.ok(model.seen.length > 0, "the model was never called");
  return { model, messages };
}

describe("Claude Agent SDK: hooks through serve's /hooks/claude", () => {
  let serve: Serve;
  before(async () => {
    serve = await startServe();
  });
  after(() => serve?.stop());

  test("a model looping on one grep is refused in stallwatch's words, then stopped", async () => {
    const { model, messages } = await runClaude(serve.url);
    const received = model.seen.flatMap((s) => s.toolResults);
    assert.equal(received[0]?.text.trim(), "1:foo is here");
    const refusals = received.filter((r) => r.isError && r.text.includes("Refused: this exact call"));
    assert.ok(refusals.length > 0, JSON.stringify(received));
    assert.ok(model.seen.length < TURNS, "the loop was never stopped");
    const said = JSON.stringify(messages).includes("Stopped:") || received.some((r) => r.text.includes("Stopped:"));
    assert.ok(said, "the stop's words reached neither the model nor the output");
  });

  test("with the server away every call runs, and one warning says so", async () => {
    const away = `http://127.0.0.1:${await freePort()}`;
    const { value, warnings } = await capturingWarnings(() => runClaude(away));
    const received = value.model.seen.flatMap((s) => s.toolResults);
    assert.equal(value.model.seen.length, TURNS + 1, "every turn ran");
    assert.ok(!received.some((r) => r.text.includes("Refused")));
    assert.equal(warnings.filter((w) => w.includes("cannot be reached")).length, 1, warnings.join("\n"));
  });
});
