"""The `stallwatch` command line: replay, explain, top, worker, fleet, demo, schemas, mcp-proxy,
serve, hook, hooks, settings."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from argparse import Namespace, _SubParsersAction

    from stallwatch.settings import Settings

    Subparsers = _SubParsersAction[argparse.ArgumentParser]

# The module a command needs, and what installs it: a missing one is named in one line.
_INSTALLS = {
    "mcp": "pip install 'stallwatch[mcp]'",
    "aiohttp": "pip install 'stallwatch[serve]'",
    **dict.fromkeys(
        ("stallwatch_streams", "prometheus_client", "faust", "mode"), "pip install stallwatch-streams"
    ),
}
# Replay jobs at most: each reads the whole log and writes a file of its own (in TMPDIR); more
# jobs than cores gain nothing.
_MAX_JOBS = 256


def main(argv: list[str] | None = None) -> int:
    from stallwatch.settings import LogSettings, ServeSettings, Settings

    args = _parser().parse_args(argv)
    from stallwatch.cli.settings_table import unknown_variables

    for warning in unknown_variables(os.environ):
        print(f"stallwatch: warning: {warning}", file=sys.stderr)
    if args.command == "settings" and (args.markdown or args.write):
        from stallwatch.cli.settings_table import main as settings_main

        return settings_main(args.markdown, args.write)
    # Read by every command, so that a bad value is one line and exit 2 before anything starts;
    # the fleet app's own are read by `stallwatch fleet` alone.
    settings = Settings.from_env()
    LogSettings.from_env()
    ServeSettings.from_env()
    return _COMMANDS[args.command](args, settings)


def _parser() -> argparse.ArgumentParser:
    # Imported here, not at the top: `stallwatch hook` runs on every tool call and needs none.
    import argparse

    parser = argparse.ArgumentParser(prog="stallwatch", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_versions()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("replay", help="run a recorded event log (JSON lines) through the engine")
    p.add_argument("file", help="the log, or - for standard input")
    p.add_argument(
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="share the runs among N processes, the same output in the same order "
        "(default 1; a log of many runs replays up to N times faster, less the reading of every "
        "line by every job; the output passes through temporary files)",
    )

    p = sub.add_parser("explain", help="one run's timeline, from a recorded log or the commands topic")
    p.add_argument("run_id")
    p.add_argument(
        "file",
        nargs="?",
        help="a recorded event log (JSON lines), or - for standard "
        "input; without it, the run's commands are read from the commands topic",
    )

    p = sub.add_parser("schemas", help="print or write the contract's JSON Schemas")
    p.add_argument("--write", metavar="DIR", help="write one file per schema into DIR")

    p = sub.add_parser("top", help="live counts from the commands topic: stops, refusals per tool")
    p.add_argument("--once", action="store_true", help="read up to the end, print once, exit")
    p.add_argument("--from-beginning", action="store_true", help="count the whole topic")

    _add_mcp_proxy(sub)
    _add_serve(sub)
    _add_hooks(sub)
    sub.add_parser("worker", help="start a stream worker (needs stallwatch-streams)")
    sub.add_parser(
        "fleet",
        help="start a fleet app worker: incidents across runs per tool (Faust; needs stallwatch-streams)",
    )
    sub.add_parser(
        "otlp-kafka",
        help="map the OpenTelemetry Collector's Kafka topic of spans (otlp_proto) to observe-only "
        "events for the workers (needs stallwatch-streams)",
    )
    sub.add_parser("demo", help="drive a simulated fleet through a local broker and a worker")

    p = sub.add_parser(
        "tenants",
        help="create a tenant's topics; every worker serves them within STALLWATCH_TENANT_SCAN_INTERVAL_S",
    )
    p.add_argument("action", choices=["add"])
    p.add_argument("tenant", nargs="+", help="tenant names: letters, digits, _ and -, 64 at most")

    p = sub.add_parser(
        "settings",
        help="every STALLWATCH_* variable and the value read from the "
        "environment, or the tables of docs/operations.md",
    )
    p.add_argument("--markdown", action="store_true", help="print the settings tables (Markdown)")
    p.add_argument("--write", metavar="FILE", help="rewrite the tables between FILE's marker comments")

    return parser


def _add_mcp_proxy(sub: Subparsers) -> None:
    """`stallwatch mcp-proxy`: its options, then the server's command after --."""
    import argparse

    from stallwatch.mcp.rounds import DEFAULT_NEW_RUN_AFTER_S, DEFAULT_ROUND_GAP_S

    p = sub.add_parser(
        "mcp-proxy",
        help="serve stdio MCP in front of a server, proposing every tool call first (needs the [mcp] extra)",
        usage="stallwatch mcp-proxy [options] -- SERVER_COMMAND [ARG ...]",
    )
    p.add_argument(
        "--mode", default="researcher", help="the runs' mode: researcher, chat or coder (default researcher)"
    )
    p.add_argument(
        "--exempt",
        action="append",
        default=[],
        metavar="GLOB",
        help="tools declared repeat_exempt (waits, polls); may be repeated",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="pass this variable to the server (its value here, or VALUE); the server "
        "gets only these and the MCP SDK's safe default (PATH, HOME, USER, SHELL, "
        "TERM, LOGNAME); may be repeated",
    )
    p.add_argument(
        "--kafka", action="store_true", help="judge through Kafka and a running worker instead of in-process"
    )
    p.add_argument(
        "--round-gap",
        type=float,
        metavar="SECONDS",
        help=f"a round ends after this long with no call in flight (default {DEFAULT_ROUND_GAP_S:g})",
    )
    p.add_argument(
        "--new-run-after",
        type=float,
        metavar="SECONDS",
        help=f"a pause this long with no call starts a new run (default {DEFAULT_NEW_RUN_AFTER_S:g})",
    )
    p.add_argument("server", nargs=argparse.REMAINDER, help="the MCP server's command, after --")


def _add_serve(sub: Subparsers) -> None:
    """`stallwatch serve`: where it listens and whose runs it judges."""
    p = sub.add_parser(
        "serve",
        help="a local HTTP service over the client's calls, the hooks of Claude Code, Codex and "
        "Gemini CLI, and OTLP/HTTP in, judged observe-only (needs the [serve] extra)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; any other needs STALLWATCH_SERVE_TOKEN)",
    )
    p.add_argument("--port", type=int, default=8737, help="port (default 8737)")
    p.add_argument(
        "--kafka", action="store_true", help="judge through Kafka and a running worker instead of in-process"
    )
    p.add_argument("--tenant", help="the tenant of the coding agents' runs")
    p.add_argument(
        "--policy",
        metavar="FILE",
        help="a JSON object of policy overrides for the coding "
        'agents\' runs (coder mode), e.g. {"stall_stop_at": 5}',
    )
    p.add_argument(
        "--open",
        action="store_true",
        help="on loopback without STALLWATCH_SERVE_TOKEN, answer any local process (by default "
        "the server makes a token that only this user's hooks and clients read)",
    )


def _add_hooks(sub: Subparsers) -> None:
    """`stallwatch hook` (the command form of a hook) and `stallwatch hooks` (install, uninstall)."""
    p = sub.add_parser(
        "hook",
        help="the command form of a coding agent's hook: forwards the payload on stdin to `stallwatch serve`",
    )
    p.add_argument("agent", choices=["claude", "codex", "gemini"])

    p = sub.add_parser("hooks", help="install or remove stallwatch's hooks in a coding agent's settings")
    p.add_argument("action", choices=["install", "uninstall"])
    p.add_argument("agent", choices=["claude", "codex", "gemini"])
    p.add_argument(
        "--scope",
        choices=["user", "project"],
        default="user",
        help="user settings (default) or the project's, in the current directory",
    )
    p.add_argument(
        "--http",
        action="store_true",
        help="Claude Code: `type: http` hooks that talk to "
        "the server directly, instead of the `stallwatch hook` command",
    )
    p.add_argument(
        "--url", help="the server's address (default $STALLWATCH_SERVE_URL or http://127.0.0.1:8737)"
    )


def _replay(args: Namespace, settings: Settings) -> int:
    from stallwatch.cli.replay import main as replay_main
    from stallwatch.cli.replay_engine import ReplayEngine
    from stallwatch.contract.advisories import advisory_key_of
    from stallwatch.engine.admin_policy import AdminPolicy
    from stallwatch.engine.canonical import secret_from_key
    from stallwatch.settings import reveal

    engine = ReplayEngine(
        AdminPolicy.of(settings),
        secret_from_key(reveal(settings.fingerprint_key)),
        settings.deadletter_raw,
        advisory_key_of(reveal(settings.advisory_key)),
        settings.tenant,
    )
    return replay_main(args.file, engine, args.jobs)


def _explain(args: Namespace, settings: Settings) -> int:
    from stallwatch.cli.explain import main as explain_main

    return explain_main(args.run_id, args.file, settings)


def _schemas(args: Namespace, settings: Settings) -> int:
    from stallwatch.contract.schema import main as schema_main

    code = schema_main(args.write)
    from stallwatch.serve.openapi import main as openapi_main

    return code or openapi_main(args.write)


def _top(args: Namespace, settings: Settings) -> int:
    from stallwatch.cli.top import main as top_main

    return top_main(settings, args.once, args.from_beginning)


def _mcp_proxy(args: Namespace, settings: Settings) -> int:
    from stallwatch.mcp.proxy import ProxyOptions
    from stallwatch.mcp.proxy import main as proxy_main

    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    given = {"round_gap_s": args.round_gap, "new_run_after_s": args.new_run_after}
    options = ProxyOptions(
        mode=args.mode,
        exempt=tuple(args.exempt),
        env=tuple(args.env),
        **{k: v for k, v in given.items() if v is not None},
    )
    return proxy_main(command, options, args.kafka, settings)


def _serve(args: Namespace, settings: Settings) -> int:
    from stallwatch.serve.main import ServeOptions
    from stallwatch.serve.main import main as serve_main

    return serve_main(
        ServeOptions(args.host, args.port, args.kafka, args.tenant, args.policy, args.open), settings
    )


def _hook(args: Namespace, settings: Settings) -> int:
    from stallwatch.hooks.command import main as hook_main

    return hook_main([args.agent])


def _hooks(args: Namespace, settings: Settings) -> int:
    from stallwatch.hooks.install import main as hooks_main

    return hooks_main(args.action, args.agent, args.scope, args.http, args.url)


def _stream_job(args: Namespace, settings: Settings) -> int:
    from stallwatch.cli.plugins import command

    return command(args.command)(settings)


def _tenants(args: Namespace, settings: Settings) -> int:
    from stallwatch.kafka.topics import add_tenants

    return add_tenants(settings, args.tenant)


def _demo(args: Namespace, settings: Settings) -> int:
    from stallwatch.cli.demo import main as demo_main

    return demo_main(settings)


def _settings(args: Namespace, settings: Settings) -> int:
    from stallwatch.cli.settings_table import main as settings_main

    return settings_main(False, None)


# What each command runs, given its arguments and the settings read from the environment.
_COMMANDS: dict[str, Callable[[Namespace, Settings], int]] = {
    "replay": _replay,
    "explain": _explain,
    "schemas": _schemas,
    "top": _top,
    "mcp-proxy": _mcp_proxy,
    "serve": _serve,
    "hook": _hook,
    "hooks": _hooks,
    "worker": _stream_job,
    "fleet": _stream_job,
    "otlp-kafka": _stream_job,
    "tenants": _tenants,
    "demo": _demo,
    "settings": _settings,
}


def _versions() -> str:
    """This installation's release, from the package metadata, and the stream jobs' when
    installed (a worker and the CLI beside it may be of different releases)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("stallwatch")
    except PackageNotFoundError:
        release = "unknown (not installed as a package)"
    try:
        return f"{release} (stallwatch-streams {version('stallwatch-streams')})"
    except PackageNotFoundError:
        return release


def _jobs(text: str) -> int:
    """`--jobs`: a whole number of processes from 1 to 256 (argparse names a bad one)."""
    import argparse

    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= jobs <= _MAX_JOBS:
        raise argparse.ArgumentTypeError(f"{jobs} is not between 1 and {_MAX_JOBS}")
    return jobs


def entry() -> int:
    """The console script: a closed pipe (`stallwatch replay log | head`) ends quietly."""
    if sys.argv[1:2] == ["hook"]:  # every tool call: no argparse, no engine, no pydantic
        from stallwatch.hooks.command import main as hook_main

        return hook_main(sys.argv[2:])
    from stallwatch.cli.plugins import MissingPlugin
    from stallwatch.settings import SetupError

    try:
        return main()
    except (SetupError, MissingPlugin) as exc:  # a setting to change or a package to install: no traceback
        print(f"stallwatch: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # as the Python docs advise
        return 1
    except OSError as exc:
        if exc.filename is None:
            raise
        # A file or program named on the command line or in a setting that cannot be opened or run.
        print(f"stallwatch: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        module = (exc.name or "").split(".")[0]
        install = _INSTALLS["aiohttp"] if sys.argv[1:2] == ["serve"] else _INSTALLS.get(module)
        if install is None:
            raise
        print(
            f"stallwatch: this command needs what it does not find (no module {exc.name!r}): {install}",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(entry())
