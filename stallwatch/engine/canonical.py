"""Canonical JSON, call signatures, result fingerprints and the structural emptiness walk."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import orjson
from xxhash import xxh3_128_digest

# Defined with the contract, which keys dead letters and long ids with the same digest; the
# engine's callers keep importing them from here (hence the explicit re-export).
from stallwatch.contract.digests import DIGEST_SIZE as DIGEST_SIZE
from stallwatch.contract.digests import derive_secret as derive_secret
from stallwatch.contract.digests import digest as digest
from stallwatch.contract.digests import secret_from_key as secret_from_key
from stallwatch.engine.masks import mask_strings

_SORT = orjson.OPT_SORT_KEYS
_JSON_OPENERS = frozenset("{[")


def canonical_bytes(value: Any) -> bytes:
    """JSON with sorted keys and no whitespace: equal values give equal bytes.

    Raises ValueError for values orjson cannot encode (nesting deeper than 255 levels,
    integers wider than 64 bits).
    """
    try:
        return orjson.dumps(value, option=_SORT)
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"value cannot be put in canonical JSON: {exc}") from None


def parse_json_text(value: Any) -> Any:
    """A string holding JSON text becomes the value it holds; anything else is returned as is.

    Only object and array texts are parsed: a plain string such as "42" or "true" stays a
    string, so a search for the text "42" never compares equal to the number 42.
    """
    if isinstance(value, str) and value.lstrip()[:1] in _JSON_OPENERS:
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def call_signature(tool: str, args: Any, secret: bytes | None = None) -> bytes | None:
    """Digest of tool name and arguments compared as values (key order, whitespace ignored).

    None for arguments that cannot be put in canonical form: such a call is never a repeat.
    """
    if type(args) is str:
        args = parse_json_text(args)
    try:
        data = tool.encode() + b"\x00" + orjson.dumps(args, option=_SORT)
        return xxh3_128_digest(data) if secret is None else digest(data, secret)
    except orjson.JSONEncodeError:
        return None


def fact_digest(result: Any, secret: bytes | None = None) -> bytes | None:
    """The digest that identifies the fact a result brings, or None when the result is empty.

    Raises ValueError when the result cannot be put in canonical form.
    """
    if type(result) is str:
        result = parse_json_text(result)
    if _is_empty(result):
        return None
    data = canonical_bytes(result)
    return xxh3_128_digest(data) if secret is None else digest(data, secret)


def fingerprint(result: Any, secret: bytes | None = None) -> tuple[str, bool]:
    """(fingerprint, empty) as a runtime sends them in place of the result: 32 hex digits of
    the digest of the canonical JSON (keyed with the shared secret when there is one), and
    whether the result is empty."""
    if type(result) is str:
        result = parse_json_text(result)
    return digest(canonical_bytes(result), secret).hex(), _is_empty(result)


def _is_empty(value: Any) -> bool:
    """True when the value holds nothing but empty containers, empty strings, 0, false and null.

    Breadth first, since a result's shallow fields (a count, a status) usually settle it at
    once; iterative, so no nesting depth can exhaust the interpreter's stack.
    """
    queue = [value]
    for item in queue:  # the list grows while it is walked
        if type(item) is dict:
            queue.extend(item.values())
        elif type(item) is list:
            queue.extend(item)
        elif item:  # non-empty strings, non-zero numbers, true; None is falsy
            return False
    return True


class PathTree:
    """Volatile paths compiled into one tree, so that a result is walked once whatever the
    number of paths: the work is at most (nodes of the result the paths reach) x (paths), and
    the walk goes no deeper than the longest path, however deep the result nests.

    A path is split on dots; a `*` segment matches any key or list index. Every field some
    path matches in the result is removed (list indexes are those of the result as given); a
    path that matches nothing changes nothing."""

    __slots__ = ("children", "leaf", "star")

    def __init__(self) -> None:
        self.children: dict[str, PathTree] = {}
        self.star: PathTree | None = None
        self.leaf = False

    @classmethod
    def of(cls, paths: Iterable[str]) -> PathTree:
        root = cls()
        for path in paths:
            if not path:
                continue
            node = root
            for segment in path.split("."):
                if segment == "*":
                    node.star = node = node.star or cls()
                else:
                    node = node.children.setdefault(segment, cls())
            node.leaf = True
        return root


def without_volatile(value: Any, paths: tuple[str, ...] | PathTree) -> Any:
    """The value with every field a volatile path matches removed; the input is not changed."""
    tree = paths if isinstance(paths, PathTree) else _tree(tuple(paths))
    return _strip(value, (tree,))


@lru_cache(maxsize=256)  # declarations repeat across runs and results; bounded, since runs declare them
def _tree(paths: tuple[str, ...]) -> PathTree:
    return PathTree.of(paths)


def _steps(nodes: tuple[PathTree, ...], segment: str) -> tuple[PathTree, ...]:
    """The tree nodes that the field `segment` leads to from `nodes`."""
    out = []
    for node in nodes:
        child = node.children.get(segment)
        if child is not None:
            out.append(child)
        if node.star is not None:
            out.append(node.star)
    return tuple(out)


def _strip(value: Any, nodes: tuple[PathTree, ...]) -> Any:
    if type(value) is dict:
        if any(node.star is not None for node in nodes):
            names: Iterable[str] = value
        else:
            names = {name for node in nodes for name in node.children if name in value}
        changed = _changed(value, ((name, _steps(nodes, name)) for name in names))
        if not changed:
            return value
        return {k: changed.get(k, v) for k, v in value.items() if changed.get(k) is not _MISSING}
    if type(value) is list:
        # What each index leads to: `*`, and any segment of digits naming it ("7", "07").
        by_index: dict[int, list[PathTree]] = {}
        for node in nodes:
            for name, child in node.children.items():
                if name.isascii() and name.isdigit() and int(name) < len(value):
                    by_index.setdefault(int(name), []).append(child)
        stars = [node.star for node in nodes if node.star is not None]
        indexes = range(len(value)) if stars else sorted(by_index)
        changed = _changed(value, ((i, (*by_index.get(i, ()), *stars)) for i in indexes))
        if not changed:
            return value
        return [changed.get(i, v) for i, v in enumerate(value) if changed.get(i) is not _MISSING]
    return value


def _changed(value: Any, slots: Iterable[tuple[Any, tuple[PathTree, ...]]]) -> dict[Any, Any]:
    """The children of `value` the paths change: _MISSING where a path ends (removed), else the
    child with its own matches removed; each slot is (key or index, the tree nodes it reaches)."""
    changed: dict[Any, Any] = {}
    for slot, after in slots:
        if any(node.leaf for node in after):
            changed[slot] = _MISSING
        elif after:
            inner = _strip(value[slot], after)
            if inner is not value[slot]:
                changed[slot] = inner
    return changed


_MISSING = object()


def _at_path(value: Any, path: str) -> Any:
    """The value at a dotted path (no wildcards; a digit segment indexes a list), or _MISSING."""
    for segment in path.split(".") if path else ():
        if type(value) is dict and segment in value:
            value = value[segment]
        elif type(value) is list and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return _MISSING
    return value


# Items of a declared facts list digested one by one: each costs Python work, so a longer list
# counts as one fact, the whole result (a changed list then looks new, never a false repeat).
MAX_FACT_ITEMS = 2048


def fact_items(value: Any, path: str) -> list[Any] | None:
    """The list at a dotted path (no wildcards), or None when the path is missing, no list, or
    longer than MAX_FACT_ITEMS."""
    value = _at_path(value, path)
    return value if type(value) is list and len(value) <= MAX_FACT_ITEMS else None


def fact_digests(tool: str, items: list[Any], key: str | None, secret: bytes | None = None) -> list[bytes]:
    """One digest per item: its identity (the value at the dotted path `key`, else the whole
    item) under the tool's name, so equal ids from two tools are two facts."""
    prefix = b"fact\x00" + tool.encode() + b"\x00"
    out = []
    for item in items:
        identity = item if key is None else _at_path(item, key)
        if identity is _MISSING:
            identity = item
        out.append(digest(prefix + canonical_bytes(identity), secret))
    return out


def declared_view(
    tool: str,
    result: Any,
    volatile: list[str],
    facts: dict[str, Any] | None,
    patterns: tuple[str, ...] = (),
    secret: bytes | None = None,
) -> tuple[Any, list[bytes] | None]:
    """A result as its tool's declarations read it, for the engine and the client alike: JSON
    text parsed, volatile patterns masked in its strings, volatile fields removed, and, when
    `facts` names a list, one digest per item (None when there is no list at the path: the
    whole result then decides). Raises ValueError for a result that cannot be compared."""
    if type(result) is str:
        result = parse_json_text(result)
    if patterns:
        result = mask_strings(result, patterns)
    if volatile:
        result = without_volatile(result, tuple(volatile))
    if not facts:
        return result, None
    items = fact_items(result, facts["path"])
    return result, None if items is None else fact_digests(tool, items, facts.get("key"), secret)


def fact_fingerprints(
    tool: str,
    result: Any,
    path: str,
    key: str | None,
    volatile: Sequence[str] = (),
    patterns: tuple[str, ...] = (),
    secret: bytes | None = None,
) -> list[str] | None:
    """What a runtime sends as `fact_fingerprints` for a tool that declares `facts`; None when
    the result has no list at `path` (the whole-result fingerprint then decides)."""
    _, digests = declared_view(tool, result, list(volatile), {"path": path, "key": key}, patterns, secret)
    return None if digests is None else [d.hex() for d in digests]
