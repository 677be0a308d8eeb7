"""The token a local `stallwatch serve` provisions when none is set, shared with the hooks of the
same user through a file only that user can read: run-changing calls then come only from the
user's own agents' hooks and clients, never from any other local account's process.

Light on imports: `stallwatch hook` reads it on every tool call."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def token_path(port: int) -> Path:
    """Where the token of a server on loopback `port` is kept: a directory of this user's under
    the temporary directory (not $HOME: agents are often run with another one)."""
    return Path(tempfile.gettempdir()) / f"stallwatch-{os.getuid()}" / f"serve-{port}.token"


def provision(port: int, token: str) -> None:
    """Write the token of the server on `port` where its hooks read it; raises OSError when the
    directory is not this user's alone."""
    path = token_path(port)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    _check_private(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)


def read(port: int) -> str | None:
    """The token of the server on `port`, or None when there is none this user may trust."""
    path = token_path(port)
    try:
        _check_private(path.parent)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as source:
            _check_private_file(os.fstat(source.fileno()))
            return source.read(256).strip() or None
    except OSError:
        return None


def forget(port: int) -> None:
    """The server stopped: its token goes with it."""
    try:
        token_path(port).unlink()
    except OSError:
        return


def _check_private(directory: Path) -> None:
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{directory} is not a directory of this user's alone")


def _check_private_file(info: os.stat_result) -> None:
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError("the token file is not this user's alone")
