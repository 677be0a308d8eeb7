"""Replays the stored SWE-bench trajectories through the engine; prints its decisions per framework.

    python -m benchmarks.trajectories.measure [--mode coder|researcher] [--data DIR] [--details]
                                              [--policy stall_stop_at=5 ...]

Figures: runs (resolved by SWE-bench), stops in resolved and in unresolved runs (by code; for
resolved runs, how many stops cut off nothing new: every later call repeats an earlier one),
refusals (by code) and how many withheld an output that differed from the last executed run
of the same call, nudges (by kind: `already-seen`, or `stall:` and the stalled call's effect,
or `empty`), and the loop check: every run of the same call with the same result or error
LOOP_LENGTH or more times in a row must be stopped within LOOP_STOP_WITHIN rounds of its start;
steps saved are the recorded rounds after the stop in runs with such a loop.
`--details` lists each stop, each changed-output refusal and each loop (commands cut short;
no observation content is printed).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.trajectories.collect import DEFAULT_DATA
from benchmarks.trajectories.load import load_runs
from benchmarks.trajectories.replay import LOOP_LENGTH, LOOP_STOP_WITHIN, Outcome, replay
from benchmarks.trajectories.runlog import Call
from stallwatch.engine.embedded import EmbeddedEngine


def _codes(counter: Counter) -> str:
    return ", ".join(f"{code} {n}" for code, n in counter.most_common()) or "-"


def _short(call: Call) -> str:
    text = str(call.args.get("command", call.args)) if isinstance(call.args, dict) else str(call.args)
    text = " ".join(text.split())
    return f"{call.tool}: {text[:70]}{'…' if len(text) > 70 else ''}"


def summarise(framework: str, outcomes: list[Outcome], details: bool) -> None:
    resolved = [o for o in outcomes if o.traj.resolved]
    stops_ok = Counter(o.stop_code for o in resolved if o.stop_code)
    stops_bad = Counter(o.stop_code for o in outcomes if o.stop_code and not o.traj.resolved)
    refusals = [(o, r) for o in outcomes for r in o.refusals]
    changed = [(o, r) for o, r in refusals if r.changed]
    loops = [(o, loop) for o in outcomes for loop in o.loops]
    caught = [(o, loop) for o, loop in loops if o.stopped_in_time(loop)]
    loop_runs = {id(o): o for o, _ in loops}
    share = f"{100 * len(changed) / len(refusals):.1f}%" if refusals else "-"
    print(f"\n{framework}: {len(outcomes)} runs ({len(resolved)} resolved)")
    harmless = sum(1 for o in resolved if o.stop_code and o.new_after_stop == 0)
    print(
        f"  stops in resolved runs      {sum(stops_ok.values()):5}   {_codes(stops_ok)}"
        f"{f'; {harmless} with nothing new after the stop' if stops_ok else ''}"
    )
    print(f"  stops in unresolved runs    {sum(stops_bad.values()):5}   {_codes(stops_bad)}")
    print(f"  refusals                    {len(refusals):5}   {_codes(Counter(r.code for _, r in refusals))}")
    print(f"  refusals, output changed    {len(changed):5}   ({share} of refusals)")
    kinds = Counter(kind for o in outcomes for _, kind in o.nudges)
    print(
        f"  nudges                      {sum(kinds.values()):5}   "
        f"in {sum(1 for o in outcomes if o.nudges)} runs; {_codes(kinds)}"
    )
    print(
        f"  loops (same call, same result x{LOOP_LENGTH}+)  {len(loops)} in {len(loop_runs)} runs; "
        f"stopped within {LOOP_STOP_WITHIN} rounds: {len(caught)}"
    )
    print(
        f"  steps saved on loop runs    {sum(o.steps_saved for o in loop_runs.values()):5}   "
        f"(all stopped runs: {sum(o.steps_saved for o in outcomes)})"
    )
    if not details:
        return
    for o in outcomes:
        if o.stop_code:
            state = "resolved" if o.traj.resolved else "unresolved"
            print(
                f"    stop {o.stop_code} at round {o.stop_round}/{len(o.traj.steps)} ({state}, "
                f"{o.new_after_stop} new calls after it) {o.traj.run_id}"
            )
    for o, r in changed:
        print(f"    changed-output refusal {r.code} round {r.round} {o.traj.run_id}  {_short(r.call)}")
    for o, loop in loops:
        verdict = "caught" if o.stopped_in_time(loop) else "MISSED"
        print(
            f"    loop x{loop.length} from round {loop.start_round} {verdict} "
            f"(stop {o.stop_code} round {o.stop_round}) {o.traj.run_id}  {_short(loop.call)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["coder", "researcher"], default="coder")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--details", action="store_true")
    parser.add_argument(
        "--policy",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="policy overrides, values as JSON (stall_stop_at=5, nudge_at=null)",
    )
    args = parser.parse_args()
    policy = {key: json.loads(value) for key, value in (item.split("=", 1) for item in args.policy)}
    runs = load_runs(args.data)
    if not runs:
        raise SystemExit(f"no trajectories under {args.data}: see benchmarks/trajectories/README.md")
    by_framework: dict[str, list[Outcome]] = defaultdict(list)
    fleet = EmbeddedEngine()
    for traj in runs:
        by_framework[traj.framework].append(replay(traj, args.mode, fleet, policy))
    print(f"mode {args.mode}, policy overrides {policy or 'none'}, {len(runs)} runs from {args.data}")
    for framework, outcomes in by_framework.items():
        summarise(framework, outcomes, args.details)


if __name__ == "__main__":
    main()
