"""Another library's private attributes are touched in one module per library: aiokafka's in
stallwatch/kafka/aiokafka_patch.py, Faust's in streams/stallwatch_streams/fleet/transport.py (each
with tests that fail if the library changes under it). Anywhere else, an attribute with a leading
underscore is read or set only on the module's own objects, listed here with why."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.source import parse

ROOT = Path(__file__).resolve().parents[1]
PATCH_MODULES = {"stallwatch/kafka/aiokafka_patch.py", "streams/stallwatch_streams/fleet/transport.py"}
OWN = {
    "os._exit",  # the standard library's exit without cleanup, public despite its name
    "run._turn",
    "run._warned",  # the PydanticAI capability's own copy of itself
    "result._state",  # PydanticAI's run state: where it keeps a run's metadata when none was given
}


def private_touches(path: Path, root: Path = ROOT) -> list[str]:
    touches = []
    for node in ast.walk(parse(path.read_text())):
        if not (
            isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
        ):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        if ast.unparse(node) not in OWN:
            touches.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return touches


def test_private_attributes_of_other_libraries_are_touched_in_their_patch_modules_only():
    packages = (ROOT / "stallwatch", ROOT / "streams" / "stallwatch_streams")
    sources = [path for package in packages for path in package.rglob("*.py")]
    touches = [
        touch
        for path in sources
        if str(path.relative_to(ROOT)) not in PATCH_MODULES
        for touch in private_touches(path)
    ]
    assert touches == []


def test_the_check_sees_a_touch_and_not_an_own_attribute(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "class C:\n    def f(self, consumer):\n        self._x = 1\n        return consumer._fetcher\n"
    )
    assert private_touches(module, tmp_path) == ["m.py:4: consumer._fetcher"]
