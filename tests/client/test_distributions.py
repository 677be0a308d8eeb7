"""The repository's two projects: stallwatch-streams requires exactly the stallwatch of its own
version, and the light project declares none of the stream jobs' libraries, in any extra."""

from __future__ import annotations

import importlib.metadata
import json
import sys
import tomllib
from pathlib import Path

import stallwatch_streams

ROOT = Path(__file__).resolve().parents[2]


def project(path: Path) -> dict:
    return tomllib.loads((path / "pyproject.toml").read_text())["project"]


def test_the_streams_project_requires_the_stallwatch_of_its_own_version():
    light, streams = project(ROOT), project(ROOT / "streams")
    assert streams["version"] == light["version"]
    assert f"stallwatch=={light['version']}" in streams["dependencies"]


def test_the_light_project_declares_no_library_of_the_stream_jobs():
    light = project(ROOT)
    every = [*light["dependencies"], *(r for extra in light["optional-dependencies"].values() for r in extra)]
    assert not [r for r in every if r.lower().startswith(("faust", "prometheus", "stallwatch"))]


def test_the_stream_jobs_are_imported_from_their_editable_install_in_this_tree():
    # One copy: the root on sys.path (pytest's pythonpath) holds no importable `stallwatch_streams`,
    # so the package comes from the editable install of streams/, whose metadata names this tree.
    assert Path(stallwatch_streams.__file__) == ROOT / "streams" / "stallwatch_streams" / "__init__.py"
    assert not (ROOT / "stallwatch_streams").exists()
    assert not [m for m in sys.modules if m == "streams" or m.startswith("streams.")]
    installed = importlib.metadata.distribution("stallwatch-streams")
    direct = json.loads(installed.read_text("direct_url.json") or "{}")
    assert direct.get("dir_info", {}).get("editable") is True
    assert Path(direct["url"].removeprefix("file://")).resolve() == (ROOT / "streams").resolve()
