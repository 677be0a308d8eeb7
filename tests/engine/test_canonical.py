"""Signatures and fingerprints compare values; the emptiness walk; properties by hypothesis."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from stallwatch.engine.canonical import call_signature, fact_digest, fingerprint


def result_fingerprint(value) -> str:
    return fingerprint(value)[0]


def is_empty(value) -> bool:
    return fact_digest(value) is None


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=25,
)


def shuffled(value, rng: random.Random):
    """The same value with every object's keys in another order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@settings(max_examples=300)
@given(json_values, st.integers(0, 2**32), st.sampled_from([None, 1, 2, 4]))
def test_fingerprints_and_signatures_ignore_key_order_and_whitespace(value, seed, indent):
    other = shuffled(value, random.Random(seed))
    text = json.dumps(other, indent=indent)  # another key order, other whitespace, as JSON text
    assert result_fingerprint(value) == result_fingerprint(other)
    assert call_signature("search", value) == call_signature("search", other)
    if isinstance(value, dict | list):
        assert result_fingerprint(value) == result_fingerprint(text)
        assert call_signature("search", value) == call_signature("search", text)


@given(json_values, json_values)
def test_different_values_give_different_fingerprints(a, b):
    if json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
        assert result_fingerprint(a) != result_fingerprint(b)


def test_the_tool_name_is_part_of_the_signature():
    assert call_signature("search", {"q": 1}) != call_signature("fetch", {"q": 1})


def test_a_plain_string_is_not_read_as_json():
    assert call_signature("s", "42") != call_signature("s", 42)
    assert call_signature("s", "not json {") == call_signature("s", "not json {")


def test_the_emptiness_walk():
    for empty in ([], {}, "", 0, 0.0, False, None, [[], {}], {"a": {"b": [None, ""]}}, "[]", " {} "):
        assert is_empty(empty), empty
    for full in ([0, 1], {"a": "x"}, "x", 1, True, {"a": [[[" "]]]}, "[1]", -0.5):
        assert not is_empty(full), full


def test_the_emptiness_walk_survives_any_depth():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert is_empty(deep)


def test_the_local_fingerprint_says_whether_the_result_is_empty():
    assert fingerprint({"items": []})[1] is True
    assert fingerprint({"items": [1]})[1] is False
    assert fingerprint({"items": [1]})[0] == fact_digest('{"items":[1]}').hex()
