"""Python source parsed for the tests that read the project's code."""

from __future__ import annotations

import ast
import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    # No collection first: deep in a session a full one takes a quarter of a second, per file.
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def parse(source: str) -> ast.Module:
    """`ast.parse` with the garbage collector held off. On CPython 3.11.7 it fails now and then,
    deep in a long test session, with `SystemError: AST constructor recursion depth mismatch`
    (python/cpython#106905, fixed in later releases); held off, no collection and no finalizer
    of an earlier test's objects runs while the tree is built."""
    with _no_collection():
        return ast.parse(source)
