"""The previous release as an operator has it: a pinned commit of this repository, built from its
own sources into a virtual environment of its own under `.cache/releases/`, once."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Release 0.1.0: run state format 5, position format 1, fleet table values without a format.
PREVIOUS_RELEASE = "cd21402303b7ffcfd603a2c7b9ad0a0e9cd89c63"
PREVIOUS_VERSION = "0.1.0"


def previous_release_python(commit: str = PREVIOUS_RELEASE) -> Path:
    """The interpreter of a venv holding `commit`'s stallwatch and stallwatch-streams, installed
    (not editable) from the commit's tree. Its third-party libraries are this checkout's (the
    same requirements: a `.pth` line adds this venv's site-packages after its own), so the build
    needs no network and takes seconds; built once, then reused."""
    home = ROOT / ".cache" / "releases" / commit
    python = home / "venv" / "bin" / "python"
    done = home / "built"
    if done.exists():
        return python
    source = home / "src"
    source.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise RuntimeError(
            f"commit {commit[:12]} (the previous release) is not in this clone: "
            f"git fetch it ({archive.stderr.decode(errors='replace').strip()})"
        )
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home / "venv")], check=True)
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "zz_this_checkouts_libraries.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            str(source),
            str(source / "streams"),
        ],
        check=True,
        cwd=home,
    )
    done.touch()
    return python
