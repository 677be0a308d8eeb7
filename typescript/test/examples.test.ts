/** Each example under examples/typescript runs offline against a real serve and is stopped. The
 * examples import `@stallwatch/client` by name: copied into this package they resolve to it. */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, test } from "node:test";

import { FakeAnthropic, type Reply } from "./anthropic-fake.js";
import { REPO, type Serve, startServe } from "./harness.js";

const EXAMPLES = resolve(REPO, "examples/typescript");
const HERE = resolve(REPO, "typescript/dist/examples"); // inside the package: its name resolves
const run = promisify(execFile);

describe("the TypeScript examples", () => {
  let serve: Serve;
  before(async () => {
    serve = await startServe();
    mkdirSync(HERE, { recursive: true });
    for (const name of readdirSync(EXAMPLES).filter((n) => n.endsWith(".mjs"))) {
      copyFileSync(join(EXAMPLES, name), join(HERE, name));
    }
  });
  after(() => serve?.stop());

  for (const name of ["ai-sdk", "langchain", "openai-agents", "mastra"]) {
    test(`${name}: the rewording loop is stopped and the model answers`, async () => {
      const env = { ...process.env, STALLWATCH_SERVE_URL: serve.url };
      const { stdout } = await run("node", [join(HERE, `${name}.mjs`)], { env });
      const out = JSON.parse(stdout.trim().split("\n").at(-1)!);
      assert.equal(out.answer, "Kafka keeps the latest value per key.");
      assert.equal(out.stop, "no_new_facts");
    });
  }

  test("claude-agent-sdk: the grep loop is stopped", async () => {
    const tmp = mkdtempSync(join(tmpdir(), "stallwatch-claude-example-"));
    const home = join(tmp, "home");
    const ws = join(tmp, "ws");
    mkdirSync(home);
    mkdirSync(ws);
    writeFileSync(join(ws, "notes.txt"), "foo is here\n");
    writeFileSync(
      join(home, ".claude.json"),
      JSON.stringify({ hasCompletedOnboarding: true, projects: { [ws]: { hasTrustDialogAccepted: true } } }),
    );
    const model = new FakeAnthropic((turn): Reply =>
      turn >= 15 ? "Final answer: gave up." : [["Bash", { command: "grep -n foo notes.txt", description: "look" }]],
    );
    const url = await model.start();
    try {
      const env = {
        PATH: process.env.PATH ?? "",
        HOME: home,
        TMPDIR: tmp,
        ANTHROPIC_BASE_URL: url,
        ANTHROPIC_API_KEY: "sk-fake",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
        DISABLE_TELEMETRY: "1",
        DISABLE_AUTOUPDATER: "1",
        DISABLE_ERROR_REPORTING: "1",
        STALLWATCH_SERVE_URL: serve.url,
      };
      const { stdout } = await run("node", [join(HERE, "claude-agent-sdk.mjs")], { env, cwd: ws });
      assert.match(stdout, /"subtype"/);
      assert.ok(model.seen.length < 15, "the loop was never stopped");
      assert.ok(model.seen.some((s) => s.toolResults.some((r) => r.text.includes("Refused: this exact call"))));
    } finally {
      await model.stop();
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
