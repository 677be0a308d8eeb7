"""Replay against orjson parse-only in CPU instructions (valgrind), steady however busy the machine.

    python benchmarks/replay_instructions.py [--lines 30000] [--log benchmarks/data/fleet.jsonl]

For the first N lines of each fleet log of replay_bench.py, counts the instructions of a full
replay and of parsing alone under `valgrind --tool=callgrind`, less those of a run over no line
(start-up and imports), and prints both per event and their ratio. Needs valgrind installed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
_COLLECTED = re.compile(rb"Collected : (\d+)")


def instructions(mode: str, log: Path, lines: int) -> int:
    """Instructions of one run of this script's `--run` mode under callgrind."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--run",
            mode,
            "--lines",
            str(lines),
            "--log",
            str(log),
        ],
        capture_output=True,
        check=True,
    )
    return int(_COLLECTED.search(done.stderr).group(1))


def run(mode: str, log: Path, count: int) -> None:
    """The measured work: parse or replay the first `count` lines."""
    import orjson

    from stallwatch.contract.commands import encode_command
    from stallwatch.engine.embedded import EmbeddedEngine, Rejected

    with log.open("rb") as f:
        lines = [line.rstrip(b"\n") for _, line in zip(range(count), f, strict=False)]
    if mode == "parse":
        for line in lines:
            orjson.loads(line)
    elif mode == "replay":
        for result in EmbeddedEngine().replay(lines):
            if not isinstance(result, Rejected):
                for command in result:
                    encode_command(command)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", default=str(HERE / "data" / "fleet.jsonl"))
    parser.add_argument("--lines", type=int, default=30_000)
    parser.add_argument("--run", choices=["parse", "replay"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        return run(args.run, Path(args.log), args.lines)
    sys.path.insert(0, str(HERE.parent))
    from benchmarks.replay_bench import worker_tests_log

    with tempfile.TemporaryDirectory() as tmp:
        worker_log = Path(tmp, "worker.jsonl")
        worker_log.write_bytes(b"\n".join(worker_tests_log()) + b"\n")
        print(f"{'log':<22}{'parse Ir/event':>16}{'replay Ir/event':>17}{'replay/parse':>14}")
        for name, log in (("fleet log", Path(args.log)), ("worker tests' log", worker_log)):
            base = instructions("replay", log, 0)
            parse = instructions("parse", log, args.lines) - base
            replay = instructions("replay", log, args.lines) - base
            print(
                f"{name:<22}{parse / args.lines:>16,.0f}{replay / args.lines:>17,.0f}{replay / parse:>13.2f}x"
            )
    return None


if __name__ == "__main__":
    main()
