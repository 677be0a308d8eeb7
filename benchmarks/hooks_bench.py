"""What a guarded tool call costs a coding agent: its two hooks (PreToolUse before the call,
PostToolUse after it), as Claude Code runs them, against `stallwatch serve` in its own process.

    python benchmarks/hooks_bench.py [--calls 200]

Four ways, each beside the same call with an empty hook:
- the command hook: one `stallwatch hook claude` process per hook, the payload on its stdin,
  against `true` (a command that prints nothing);
- the http hook: a POST per hook on one kept-alive connection, against a server that answers {};
each with the engine in the server's process, then (when a broker answers at
$STALLWATCH_BOOTSTRAP) with `serve --kafka` and a worker. Every call is a new command, so none
is refused: the common case. No transcript_path: rounds by the gap rule, no transcript read.
Prints p50 and p99 per call (both hooks) in ms. Wall-clock on a shared machine: run it quiet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
STALLWATCH = str(Path(sys.executable).with_name("stallwatch"))
EMPTY_SERVER = """
import sys
from aiohttp import web
async def empty(request):
    await request.read()
    return web.json_response({})
app = web.Application()
app.add_routes([web.post("/hooks/{agent}", empty), web.get("/v1/health", empty)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""

Hook = Callable[[bytes], Awaitable[None]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def payloads(session: str, i: int) -> tuple[bytes, bytes]:
    """One call's PreToolUse and PostToolUse, as Claude Code sends them."""
    call = {
        "session_id": session,
        "cwd": "/ws",
        "tool_name": "Bash",
        "tool_use_id": f"toolu_{i:06d}",
        "tool_input": {"command": f"grep -n item{i} notes.txt", "description": "look"},
    }
    pre = {**call, "hook_event_name": "PreToolUse"}
    post = {
        **call,
        "hook_event_name": "PostToolUse",
        "tool_response": {"stdout": f"{i}:item{i}\n", "stderr": "", "interrupted": False},
    }
    return json.dumps(pre).encode(), json.dumps(post).encode()


async def per_call(hook: Hook, calls: int, warmup: int = 10) -> list[float]:
    session = f"bench-{uuid.uuid4().hex[:8]}"
    out = []
    for i in range(warmup + calls):
        pre, post = payloads(session, i)
        start = time.perf_counter()
        await hook(pre)
        await hook(post)  # the tool's own run lies between; it is not the hooks' cost
        if i >= warmup:
            out.append(time.perf_counter() - start)
    return out


def command_hook(argv: list[str], env: dict[str, str]) -> Hook:
    async def run(payload: bytes) -> None:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        await proc.communicate(payload)

    return run


def http_hook(http: aiohttp.ClientSession, url: str) -> Hook:
    async def post(payload: bytes) -> None:
        async with http.post(
            f"{url}/hooks/claude", data=payload, headers={"Content-Type": "application/json"}
        ) as response:
            await response.read()

    return post


@asynccontextmanager
async def process(argv: list[str], url: str, env: dict[str, str] | None = None) -> AsyncIterator[str]:
    proc = subprocess.Popen(
        argv, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(f"{url}/v1/health") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
            else:
                raise SystemExit(f"{argv[:3]} never answered on {url}")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


async def measure(name: str, url: str, calls: int) -> dict[str, list[float]]:
    env = {"PATH": os.environ.get("PATH", ""), "STALLWATCH_SERVE_URL": url}
    command = command_hook([STALLWATCH, "hook", "claude"], env)
    async with aiohttp.ClientSession() as http:
        return {
            f"{name}, command hook": await per_call(command, calls),
            f"{name}, http hook": await per_call(http_hook(http, url), calls * 5),
        }


async def empty_hooks(calls: int) -> dict[str, list[float]]:
    port = free_port()
    async with (
        process([sys.executable, "-c", EMPTY_SERVER, str(port)], f"http://127.0.0.1:{port}") as url,
        aiohttp.ClientSession() as http,
    ):
        return {
            "empty, command hook (`true`)": await per_call(command_hook(["true"], {}), calls),
            "empty, http hook (answers {})": await per_call(http_hook(http, url), calls * 5),
        }


def broker_answers(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


async def through_kafka(calls: int) -> dict[str, list[float]] | None:
    bootstrap = os.environ.get("STALLWATCH_BOOTSTRAP", "127.0.0.1:9092")
    if not broker_answers(bootstrap):
        print(f"--kafka: skipped, no broker at {bootstrap} (make kafka-up, or make bench)")
        return None
    sys.path.insert(0, str(ROOT))  # the tests' harness starts the worker
    from tests.kafka_harness import WorkerProcess, fresh_settings, wait_until_serving

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the probe asks before topics exist
    settings = fresh_settings(partitions=2)
    worker = WorkerProcess(settings, "hooks-bench")
    try:
        await wait_until_serving(settings)
        port = free_port()
        env = {
            "STALLWATCH_BOOTSTRAP": settings.bootstrap,
            "STALLWATCH_TOPIC_PREFIX": settings.topic_prefix,
            "STALLWATCH_PARTITIONS": str(settings.partitions),
            "STALLWATCH_REPLICATION_FACTOR": "1",
            "STALLWATCH_MIN_INSYNC_REPLICAS": "1",
        }
        async with process(
            [STALLWATCH, "serve", "--kafka", "--port", str(port)], f"http://127.0.0.1:{port}", env
        ) as url:
            return await measure("--kafka", url, calls)
    finally:
        worker.stop()


def report(figures: dict[str, list[float]]) -> None:
    print(f"{'ms per guarded call (PreToolUse + PostToolUse)':<48} {'p50':>7} {'p99':>7}  calls")
    for name, times in figures.items():
        ms = sorted(t * 1000 for t in times)
        p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
        print(f"{name:<48} {statistics.median(ms):7.2f} {p99:7.2f}  {len(ms)}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--calls",
        type=int,
        default=200,
        help="tool calls per command-hook figure (5 times as many for the http hooks)",
    )
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    figures = await empty_hooks(args.calls)
    port = free_port()
    async with process([STALLWATCH, "serve", "--port", str(port)], f"http://127.0.0.1:{port}") as url:
        figures |= await measure("in-process", url, args.calls)
    figures |= await through_kafka(args.calls) or {}
    report(figures)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
