"""The shell read-only rule: plain reads read; anything that may write is unknown."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stallwatch.engine.shell import _prints_only, shell_effect
from tests.fuzz_budget import examples


@pytest.mark.parametrize(
    "command",
    [
        "cat django/forms/fields.py",
        "ls -la && grep -rn 'def clean' django/forms | head -20",
        "sed -n '100,140p' src/module.py",
        "nl -ba x.py | sed -n '10,20p'",
        "find . -name '*.py' | xargs grep -l Validator",
        "cd /testbed && git status && git diff",
        "grep foo x.py 2>&1 | tail -5",
        "ls missing 2>/dev/null",
        "sed -n '10,20p' x.py",
        "sed -n '/def main/p' x.py",
        "sed 's/a/b/g' x.py",
        "sed 5q x.py",
    ],
)
def test_reading_commands_read(command):
    assert shell_effect(command) == "read"


@pytest.mark.parametrize(
    "command",
    [
        "python reproduce.py",
        "python -m pytest tests/test_x.py -q",
        "sed -i 's/a/b/' x.py",
        "cat <<'EOF' > reproduce.py\nprint(1)\nEOF",
        "echo 'x = 1' >> settings.py",
        "git checkout django/forms/fields.py",
        "find . -name '*.pyc' -delete",
        "grep -l foo $(git ls-files)",
        "rm reproduce.py",
        "cat x.py | python -c 'import sys'",
        "echo 'unbalanced",
        "sort -o out.txt in.txt",
        # writers hidden among options, operands and scripts
        "sed -Ei 's/foo/bar/' a.py",
        "sed -ni '1p' a.py",
        "sed 's/a/b/w out.txt' x.py",
        "sed -e '1w out.txt' x.py",
        "sed '1e rm -rf x' x.py",
        "sort -uo out.txt in.txt",
        "uniq in.txt out.txt",
        "xxd in.bin out.hex",
        "tree -o listing.txt",
        "git diff --output=patch.diff",
        "awk '{print > \"f\"}' x",
    ],
)
def test_commands_that_may_write_are_unknown(command):
    assert shell_effect(command) == "unknown"


def test_cd_changes_a_persistent_session():
    assert shell_effect("cd src && ls") == "read"  # a fresh shell per command: cd stays inside
    assert shell_effect("cd src && ls", persistent=True) == "unknown"
    assert shell_effect("ls src", persistent=True) == "read"


# The sed rule as a regular expression, for reference only: on short scripts the scanner accepts
# exactly what it does (the expression backtracks for minutes on a line of digits).
_SED_PRINTS_REFERENCE = re.compile(
    r"(?:\s*(?:\d+|\$)?(?:,(?:\d+|\$))?\s*[pq=l]?\s*;?)+"
    r"|/[^/]*/\s*[pq=l]"
    r"|s(?P<d>[^\w\s\\])(?:(?!(?P=d)).)*(?P=d)(?:(?!(?P=d)).)*(?P=d)[gIp0-9]*"
)


@settings(max_examples=examples(500, 20_000), deadline=None)
@given(st.text(st.sampled_from(list("12$,;pq=lx /s|\\\ngIw\t٣_")), max_size=10))
def test_the_sed_scanner_reads_scripts_as_the_reference_expression_does(script):
    assert _prints_only(script) == bool(_SED_PRINTS_REFERENCE.fullmatch(script))
