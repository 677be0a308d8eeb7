"""The two wheels of the repository: `stallwatch`, the light client an agent runtime installs,
holds only the `stallwatch` package and imports neither Faust nor prometheus-client;
`stallwatch-streams` holds the stream jobs and gives the command line its `worker` and `fleet`
commands through entry points. Both are marked typed (PEP 561), so that a runtime's own type
checker reads their annotations instead of treating them as untyped."""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.source import parse

pytestmark = pytest.mark.e2e  # builds and installs wheels

ROOT = Path(__file__).resolve().parents[2]
# Top-level modules no file of the light wheel may import.
STREAM_ONLY = {"faust", "prometheus_client", "mode", "stallwatch_streams", "streams"}


def built(project: Path, names: tuple[str, ...], out: Path) -> Path:
    """The wheel of `project`, built from a copy of `names` in it: a build in the work tree leaves
    a build/ folder whose stale files a later wheel would take in, whatever the package data says."""
    source = out / "source" / project.name
    for name in names:
        if (project / name).is_dir():
            shutil.copytree(project / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy(project / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(out / "wheels"),
            str(source),
        ],
        check=True,
        timeout=600,
        capture_output=True,
    )
    (wheel,) = (out / "wheels").glob("*.whl")
    return wheel


def imported_modules(source: str) -> set[str]:
    """The top-level names a module imports, function-level and TYPE_CHECKING imports included."""
    names = set()
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    light = built(ROOT, ("stallwatch", "pyproject.toml", "README.md"), out / "light")
    streams = built(ROOT / "streams", ("stallwatch_streams", "pyproject.toml", "README.md"), out / "streams")
    return {"light": light, "streams": streams}


def test_the_light_wheel_holds_only_the_stallwatch_package(wheels: dict[str, Path]) -> None:
    names = zipfile.ZipFile(wheels["light"]).namelist()
    outside = [n for n in names if not n.startswith("stallwatch/") and ".dist-info/" not in n]
    assert outside == []
    assert "stallwatch/cli/main.py" in names and "stallwatch/py.typed" in names


def test_no_module_of_the_light_wheel_imports_the_stream_jobs_or_their_libraries(
    wheels: dict[str, Path],
) -> None:
    archive = zipfile.ZipFile(wheels["light"])
    sources = [n for n in archive.namelist() if n.endswith(".py")]
    assert len(sources) > 50  # the whole package, not an empty wheel
    offenders = {n: sorted(imported_modules(archive.read(n).decode()) & STREAM_ONLY) for n in sources}
    assert {n: found for n, found in offenders.items() if found} == {}


def test_the_light_wheel_requires_neither_faust_nor_prometheus_client(wheels: dict[str, Path]) -> None:
    archive = zipfile.ZipFile(wheels["light"])
    (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    requires = [
        line.split(":", 1)[1].strip().lower()
        for line in archive.read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert requires and not [r for r in requires if r.startswith(("faust", "prometheus", "stallwatch"))]


def test_the_streams_wheel_holds_its_package_and_the_command_lines_entry_points(
    wheels: dict[str, Path],
) -> None:
    archive = zipfile.ZipFile(wheels["streams"])
    names = archive.namelist()
    outside = [n for n in names if not n.startswith("stallwatch_streams/") and ".dist-info/" not in n]
    assert outside == []
    for module in (
        "worker/service.py",
        "fleet/main.py",
        "otlp/job.py",
        "fleet/settings.py",
        "metrics.py",
        "py.typed",
    ):
        assert f"stallwatch_streams/{module}" in names, module
    (points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    parsed = configparser.ConfigParser()
    parsed.read_string(archive.read(points).decode())
    assert dict(parsed["stallwatch.commands"]) == {
        "worker": "stallwatch_streams.worker.service:main",
        "fleet": "stallwatch_streams.fleet.main:main",
        "otlp-kafka": "stallwatch_streams.otlp.main:main",
    }
    assert dict(parsed["stallwatch.settings"]) == {"fleet": "stallwatch_streams.fleet.settings:FleetSettings"}
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"Requires-Dist: stallwatch=={version}" in archive.read(metadata).decode().splitlines()


def test_installed_wheels_hold_the_py_typed_marker_of_both_packages(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    installed = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(installed),
            str(wheels["light"]),
            str(wheels["streams"]),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    for marker in ("stallwatch/py.typed", "stallwatch_streams/py.typed"):
        assert (installed / marker).is_file(), marker
    assert not (installed / "streams").exists()
