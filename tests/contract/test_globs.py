"""Globs over tool names run on RE2 and match exactly what fnmatch would."""

from __future__ import annotations

import time
from fnmatch import fnmatchcase

from hypothesis import given, settings
from hypothesis import strategies as st

from stallwatch.contract.globs import glob_matches
from tests.fuzz_budget import examples

GLOB_CHARS = list("ab*?[]!-^\\\nz&~|")
NAME_CHARS = list("ab]!-^\\\nz[&~|")


@settings(max_examples=examples(600, 30_000), deadline=None)
@given(st.text(st.sampled_from(GLOB_CHARS), max_size=9), st.text(st.sampled_from(NAME_CHARS), max_size=6))
def test_a_glob_matches_what_fnmatch_matches(pattern, name):
    assert glob_matches(name, pattern) == fnmatchcase(name, pattern)


def test_a_glob_of_many_stars_is_linear_in_the_name():
    started = time.process_time()
    assert not glob_matches("a" * 100_000, "*a" * 50 + "b")
    assert time.process_time() - started < 0.5
