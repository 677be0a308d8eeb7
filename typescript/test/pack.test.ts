/** `npm pack` makes a tarball that installs in an empty folder and works there. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";

import { REPO, type Serve, startServe } from "./harness.js";

const PACKAGE = resolve(REPO, "typescript");
let serve: Serve;
let dir: string;

before(async () => {
  serve = await startServe();
  dir = mkdtempSync(join(tmpdir(), "stallwatch-pack-"));
});
after(async () => {
  await serve?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const npm = (args: string[], cwd: string) =>
  execFileSync("npm", [...args, "--no-audit", "--no-fund", "--loglevel=error"], { cwd, encoding: "utf8" });

test("the packed tarball installs in an empty folder, imports, and judges a call", () => {
  npm(["pack", "--pack-destination", dir], PACKAGE);
  const tarball = readdirSync(dir).find((name) => name.endsWith(".tgz"));
  assert.ok(tarball, "npm pack made a tarball");
  const app = join(dir, "app");
  execFileSync("mkdir", [app]);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  npm(["install", "--offline", join(dir, tarball)], app); // no dependencies: nothing to fetch
  const installed = join(app, "node_modules/@stallwatch/client");
  for (const file of ["dist/src/index.d.ts", "dist/src/adapters/ai.d.ts", "dist/src/openapi.d.ts"]) {
    assert.ok(existsSync(join(installed, file)), `${file} is in the package`);
  }
  assert.ok(!existsSync(join(installed, "dist/test")), "the tests are not in the package");
  assert.ok(!existsSync(join(app, "node_modules/ai")), "no framework is pulled in");
  writeFileSync(
    join(app, "check.mjs"),
    `import { StallwatchClient } from "@stallwatch/client";
import { stallwatch } from "@stallwatch/client/ai";
const client = new StallwatchClient({ baseUrl: process.argv[2] });
const run = await client.startRun("packed-" + process.pid, { tools: [{ name: "search" }] });
const first = await run.propose("search", { q: "kafka" });
const again = await run.propose("search", { q: "kafka" });
await run.end();
console.log(JSON.stringify({ first: first.allowed, again: again.allowed, settings: Object.keys(stallwatch({ client })).sort() }));
`,
  );
  const out = JSON.parse(execFileSync("node", ["check.mjs", serve.url], { cwd: app, encoding: "utf8" }));
  assert.deepEqual(out, {
    first: true,
    again: false,
    settings: ["onAbort", "onError", "onFinish", "onToolExecutionEnd", "prepareStep", "stopWhen", "toolApproval"],
  });
});
