"""Copy the trajectory sample out of local snapshots of its public repositories.

    python -m benchmarks.trajectories.collect --mirrors /work/.mirror [--out DIR]

Each source is read with `git show` from a snapshot's git directory (`OWNER+NAME/repo`) at the
commit in SOURCES, and written compressed under `--out` (default: the gitignored
benchmarks/data/trajectories/). README.md in this folder gives each source's licence.
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
# Where the sample is read from: the steering repository's shared/trajectories/ (laid beside every
# clone, CI's included) once it holds the sample, else the gitignored copy `collect` writes. Data
# brought from public repositories may not be committed to this repository itself.
_SHARED = _ROOT.parent / "shared" / "trajectories"
DEFAULT_DATA = _SHARED if _SHARED.is_dir() else _ROOT / "benchmarks" / "data" / "trajectories"
_MINI = "swebench_results/20251118_gemini-3-pro-74pct/trajs"
_ADP = "datasets"
_MSB = "evaluation/java/verified/20240825_SWE-agent_"
_MSB_COMMIT = "89888f1604001fcd80b0799a37af42a1bfebfd8f"
# The four runs SWE-bench evaluated whole (the gpt-4o-mini run's results cover 1 of 91).
_MSB_MODELS = ("deepseek-chat-v2", "deepseek-coder-v2", "doubao-pro-128k", "gpt-4o-2024-05-13")
# (repository, commit, path or folder in it, where it goes under the data folder)
SOURCES = [
    ("gruckion/mini-swe-agent", "d12a71affd95403b036b2bdbd827349b77bfffb9", _MINI, "mini-swe-agent"),
    (
        "gruckion/mini-swe-agent",
        "d12a71affd95403b036b2bdbd827349b77bfffb9",
        f"{_MINI}/sb-cli-reports/swe-bench_verified__test__20251118_mini-v1.15.0_gemini-3-pro-preview-20251118.json",
        "mini-swe-agent/sb-cli-report.json",
    ),
    (
        "zhu-yiqi/agent-data-protocol",
        "df5b5adc3b61adbe0a0cc250d56a781cbffc867e",
        f"{_ADP}/swe-gym_openhands_sampled_trajectories/sample_raw.json",
        "openhands/swe-gym-sampled.json.gz",
    ),
    (
        "zhu-yiqi/agent-data-protocol",
        "df5b5adc3b61adbe0a0cc250d56a781cbffc867e",
        f"{_ADP}/swe-smith/sample_raw.json",
        "swe-agent/swe-smith.json.gz",
    ),
    *[
        (repo, _MSB_COMMIT, f"{_MSB}{model}/{path}", f"swe-agent-2024/{model}/{dest}")
        for repo in ("multi-swe-bench/experiments",)
        for model in _MSB_MODELS
        for path, dest in (("trajs", "trajs"), ("results/results.json", "results.json"))
    ],
]


def _git(repo_dir: Path, *args: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(repo_dir), *args], check=True, capture_output=True).stdout


def _write(data: bytes, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(gzip.compress(data) if target.suffix == ".gz" else data)


def collect(mirrors: Path, out: Path) -> int:
    """Copies every source; returns the number of files written."""
    written = 0
    for repo, commit, path, dest in SOURCES:
        repo_dir = mirrors / repo.replace("/", "+") / "repo"
        if dest.endswith((".json", ".gz")):
            _write(_git(repo_dir, "show", f"{commit}:{path}"), out / dest)
            written += 1
            continue
        listing = _git(repo_dir, "ls-tree", "-r", "--name-only", commit, path).decode().splitlines()
        for name in (n for n in listing if n.endswith((".traj.json", ".traj"))):
            _write(_git(repo_dir, "show", f"{commit}:{name}"), out / dest / (Path(name).name + ".gz"))
            written += 1
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=_ROOT / "benchmarks" / "data" / "trajectories")
    args = parser.parse_args()
    print(f"wrote {collect(args.mirrors, args.out)} files under {args.out}")


if __name__ == "__main__":
    main()
