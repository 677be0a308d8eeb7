"""No backtracking regular expression runs on input anywhere in the product: text from events,
hooks and results is matched by RE2 (linear in the text) or by hand-written scanners. Python's
`re` (and fnmatch, which compiles to it) may appear only where the text is the operator's own and
short, each such use listed here with why; a new use fails this test until it is reviewed."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [ROOT / "stallwatch", ROOT / "streams" / "stallwatch_streams"]
BACKTRACKING = {"re", "fnmatch", "regex", "glob"}

# module -> (uses of a backtracking module's functions, why the text is never input)
ALLOWED = {
    "stallwatch/settings.py": (
        1,
        "a topic name from the broker's metadata (at most 249 characters) against one character class",
    ),
    "stallwatch/kafka/topics.py": (1, "the operator's tenant names, on `stallwatch tenants add`"),
    "stallwatch/cli/settings_table.py": (1, "the repository's own docs/operations.md, by `make docs`"),
    "stallwatch/mcp/proxy.py": (1, "environment variable names from the operator's command line"),
}


def uses(path: Path) -> int:
    """Imports of a backtracking module (and names taken from one) plus calls through one."""
    tree = ast.parse(path.read_text(), str(path))
    aliases: set[str] = set()
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name in BACKTRACKING}
        elif isinstance(node, ast.ImportFrom) and node.module in BACKTRACKING:
            count += len(node.names)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in aliases
        ):
            count += 1
    return count


def test_only_the_reviewed_modules_use_a_backtracking_regex_and_only_as_often_as_reviewed():
    found = {}
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            n = uses(path)
            if n:
                found[str(path.relative_to(ROOT))] = n
    assert found == {module: n for module, (n, _) in ALLOWED.items()}


def test_the_check_sees_each_kind_of_use(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import re\nimport fnmatch as f\nfrom re import sub\n"
        "X = re.compile('a+')\ndef g(t):\n    return f.fnmatchcase(t, '*') or re.search('a', t)\n"
    )
    assert uses(sample) == 4
    sample.write_text("import re2\nX = re2.compile('a+')\n")
    assert uses(sample) == 0
