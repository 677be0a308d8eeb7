"""The wheel an agent runtime installs marks both packages as typed (PEP 561), so that the
runtime's own type checker reads stallwatch's annotations instead of treating it as untyped."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # builds and installs a wheel

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("stallwatch/py.typed", "streams/py.typed")


def test_an_installed_wheel_holds_the_py_typed_marker_of_both_packages(tmp_path: Path) -> None:
    # Built from a copy: a build in the work tree leaves a build/ folder whose stale files a
    # later wheel would take in, whatever the package data says.
    source = tmp_path / "source"
    for name in ("stallwatch", "streams"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                    str(built), str(source)], check=True, timeout=600, capture_output=True)
    (wheel,) = built.glob("stallwatch-*.whl")
    assert set(MARKERS) <= set(zipfile.ZipFile(wheel).namelist())
    installed = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--target", str(installed), str(wheel)], check=True, timeout=300,
                   capture_output=True)
    for marker in MARKERS:
        assert (installed / marker).is_file(), marker
