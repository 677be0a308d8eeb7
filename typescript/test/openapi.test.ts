/** src/openapi.ts is what openapi-typescript makes of schemas/openapi.json today. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";

import { REPO } from "./harness.js";

const PACKAGE = resolve(REPO, "typescript");

test("the checked-in types match schemas/openapi.json", () => {
  const dir = mkdtempSync(join(tmpdir(), "stallwatch-openapi-"));
  try {
    const out = join(dir, "openapi.ts");
    const generate = JSON.parse(readFileSync(join(PACKAGE, "package.json"), "utf8")).scripts.generate as string;
    // the package's own `generate` script, writing elsewhere
    const args = generate.split(" ").slice(1);
    args[args.indexOf("-o") + 1] = out;
    execFileSync(join(PACKAGE, "node_modules/.bin/openapi-typescript"), args, { cwd: PACKAGE, stdio: "pipe" });
    assert.ok(
      readFileSync(out, "utf8") === readFileSync(join(PACKAGE, "src/openapi.ts"), "utf8"),
      "typescript/src/openapi.ts drifted from schemas/openapi.json: run `npm run generate` in typescript/ and commit it",
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
