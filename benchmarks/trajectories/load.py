"""Every stored run of every framework, converted: the input of measure.py and the tests."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.trajectories import codeact, mini_swe_agent, swe_agent
from benchmarks.trajectories.collect import DEFAULT_DATA
from benchmarks.trajectories.runlog import Trajectory

_TRAJ_SUFFIX = ".traj.json.gz"


def read_json(path: Path) -> Any:
    """A JSON file, gzip-compressed or not."""
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def mini_runs(folder: Path) -> Iterator[Trajectory]:
    """mini-swe-agent runs, resolved as SWE-bench's report (sb-cli-report.json) says."""
    resolved = set(read_json(folder / "sb-cli-report.json")["resolved_ids"])
    for path in sorted(folder.glob("*" + _TRAJ_SUFFIX)):
        instance = path.name.removesuffix(_TRAJ_SUFFIX)
        yield mini_swe_agent.convert(read_json(path), instance, instance in resolved)


def swe_agent_runs(folder: Path) -> Iterator[Trajectory]:
    """SWE-agent runs of one model, resolved as the evaluation's results.json says."""
    resolved = set(read_json(folder / "results.json")["resolved"])
    for path in sorted((folder / "trajs").glob("*.traj.gz")):
        instance = path.name.removesuffix(".traj.gz")
        yield swe_agent.convert(read_json(path), f"{folder.name}/{instance}", instance in resolved)


def load_runs(data: Path = DEFAULT_DATA) -> list[Trajectory]:
    """All runs found under `data` (missing folders are skipped)."""
    runs: list[Trajectory] = []
    if (data / "mini-swe-agent").is_dir():
        runs.extend(mini_runs(data / "mini-swe-agent"))
    for folder in sorted((data / "swe-agent-2024").glob("*/")):
        runs.extend(swe_agent_runs(folder))
    for path in sorted((data / "openhands").glob("*.json.gz")):
        runs.extend(codeact.convert_openhands(record) for record in read_json(path))
    for path in sorted((data / "swe-agent").glob("*.json.gz")):
        runs.extend(codeact.convert_function_text(record) for record in read_json(path))
    return runs
