/** A real `stallwatch serve` on a free port, started from the repository's venv, and its words. */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createServer } from "node:net";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const VENV = process.env.STALLWATCH_VENV ?? resolve(REPO, ".venv");
const STARTUP_MS = 60_000; // python's start on a busy machine

export interface Serve {
  url: string;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? ok(address.port) : fail(new Error("no port"))));
    });
  });
}

/** Start `stallwatch serve` and wait for its "listening" line (bounded). */
export async function startServe(args: string[] = [], port?: number, env: Record<string, string> = {}): Promise<Serve> {
  port ??= await freePort();
  // Open to any local process unless a test gives a token: the adapters' tests are about the
  // runtimes, and the token's path has tests of its own (client.test.ts).
  const open = env.STALLWATCH_SERVE_TOKEN ? [] : ["--open"];
  const child = spawn(resolve(VENV, "bin/stallwatch"), ["serve", "--port", String(port), ...open, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env },
  });
  const stderr: string[] = [];
  child.stderr?.on("data", (chunk: Buffer) => stderr.push(chunk.toString()));
  const url = `http://127.0.0.1:${port}`;
  await new Promise<void>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`serve did not start in ${STARTUP_MS} ms: ${stderr.join("")}`)), STARTUP_MS);
    for (const stream of [child.stdout!, child.stderr!]) {
      createInterface({ input: stream }).on("line", (line) => {
        if (line.includes(`listening on ${url}`)) {
          clearTimeout(timer);
          ok();
        }
      });
    }
    child.once("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`serve exited (${code}): ${stderr.join("")}`));
    });
  });
  return { url, stop: () => stopChild(child) };
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return Promise.resolve();
  return new Promise((ok) => {
    child.once("exit", () => ok());
    child.kill("SIGTERM");
  });
}

/** The engine's own words, read from the Python package: what the model must be shown. */
export interface Words {
  nudge3: string;
  duplicateSearch: string;
  stopNoNewFacts: string;
  stopFailures: string;
  stopTime: string;
  allowed: string;
}

export function engineWords(): Words {
  const code = `
import json
from stallwatch.engine import words
print(json.dumps({
  "nudge3": words.nudge(3),
  "duplicateSearch": words.duplicate_call("search"),
  "stopNoNewFacts": words.stop_reason("no_new_facts", {"already_seen_streak": 5}),
  "stopFailures": words.stop_reason("tool_failures", {"tool": "fetch", "consecutive_failures": 5}),
  "stopTime": words.stop_reason("time_limit", {"time_limit_s": 0.3}),
  "allowed": words.ALLOWED,
}))`;
  return JSON.parse(execFileSync(resolve(VENV, "bin/python"), ["-c", code], { encoding: "utf8" })) as Words;
}

/** Collect console.warn lines while `body` runs (the fail-open warnings). */
export async function capturingWarnings<T>(body: () => Promise<T>): Promise<{ value: T; warnings: string[] }> {
  const warnings: string[] = [];
  const original = console.warn;
  console.warn = (...parts: unknown[]) => void warnings.push(parts.map(String).join(" "));
  try {
    return { value: await body(), warnings };
  } finally {
    console.warn = original;
  }
}
