"""Who may read a tenant's incidents on the fleet app's web port.

With STALLWATCH_FLEET_READER_TOKENS_DIR set (a folder, as Kubernetes mounts a Secret): each file
named for a tenant holds the token that reads that tenant's list, `/incidents/<tenant>/`, and
the file `shared.token` the token of the shared topic's list, `/incidents/` (a tenant's name
has no dot, so no tenant can be named so). A request carries its token as
`Authorization: Bearer <token>`; a token reads one list, and every other answer is the same 401,
whether the tenant exists or not. The folder is read again every few seconds, so a token added
or rotated in the Secret takes effect without a restart.

Unset: the lists answer only to this host (a loopback peer: `kubectl port-forward`, `exec`), and
a fleet app that binds beyond loopback says so at start.
"""

from __future__ import annotations

import hmac
import logging
import string
import time
from collections.abc import Callable
from pathlib import Path

from stallwatch.settings import SetupError, is_loopback

log = logging.getLogger("stallwatch_streams.fleet.service")

SHARED_TOKEN_FILE = "shared.token"
# stallwatch.settings.TENANT_NAME: ^[A-Za-z0-9_-]{1,64}$ (tests/streams/fleet/test_web.py holds
# the two the same).
TENANT_CHARS = frozenset(string.ascii_letters + string.digits + "_-")
MAX_TENANT_CHARS = 64
# Shorter is guessable (as a fingerprint key: stallwatch.settings.MIN_FINGERPRINT_KEY_CHARS).
MIN_TOKEN_CHARS = 16
# A token file holds one line; anything longer is not a token.
MAX_TOKEN_BYTES = 4096
RELOAD_S = 5.0


def is_tenant_name(name: str) -> bool:
    """A tenant's name as stallwatch.settings.TENANT_NAME has it, checked without a regex."""
    return 0 < len(name) <= MAX_TENANT_CHARS and all(c in TENANT_CHARS for c in name)


def read_tokens(folder: Path) -> dict[str | None, bytes]:
    """Each tenant's token (None: the shared topic's) from the folder's files. Files named
    otherwise (the kubelet's `..data`) are passed over; a token too short is refused, loudly."""
    found: dict[str | None, bytes] = {}
    for path in sorted(folder.iterdir()):
        name = path.name
        if name == SHARED_TOKEN_FILE:
            tenant: str | None = None
        elif is_tenant_name(name):
            tenant = name
        else:
            continue
        if not path.is_file():
            continue
        with path.open("rb") as file:
            token = file.read(MAX_TOKEN_BYTES + 1).strip()
        if len(token) < MIN_TOKEN_CHARS or len(token) > MAX_TOKEN_BYTES:
            log.error(
                "reader token %s in %s: not %d to %d characters; that list stays closed",
                name,
                folder,
                MIN_TOKEN_CHARS,
                MAX_TOKEN_BYTES,
            )
            continue
        found[tenant] = token
    return found


class Readers:
    """The decision for each request to a list of incidents."""

    def __init__(self, folder: Path | None, bind: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.folder, self.bind, self.clock = folder, bind, clock
        self.tokens: dict[str | None, bytes] = {}
        self.read_at = float("-inf")
        if folder is None:
            return
        if not folder.is_dir():
            raise SetupError(
                f"STALLWATCH_FLEET_READER_TOKENS_DIR={folder} is not a folder this process can read"
            )
        self._reload()

    def warn_if_local_only(self) -> None:
        """Said once at start (the app's logging is set by then): lists no tenant can read."""
        if self.folder is None and not is_loopback(self.bind):
            log.warning(
                "STALLWATCH_FLEET_READER_TOKENS_DIR is unset: the incidents lists answer only "
                "to this host, though the web port listens on %s; set it to a folder of "
                "per-tenant tokens (docs/operations.md) for tenants to read their own",
                self.bind,
            )

    def allows(self, tenant: str | None, peer: str | None, authorization: str | None) -> bool:
        """May this request read `tenant`'s list (None: the shared topic's)?"""
        if self.folder is None:
            return is_loopback(peer)
        if self.clock() - self.read_at >= RELOAD_S:
            self._reload()
        expected = self.tokens.get(tenant)
        given = (authorization or "").encode("utf-8", "surrogateescape")
        if not given.startswith(b"Bearer "):
            return False
        # Compared in constant time even for a tenant without a token: the answer's time does
        # not say which tenants have one.
        return hmac.compare_digest(given[7:], expected or b"\0") and expected is not None

    def _reload(self) -> None:
        assert self.folder is not None
        try:
            self.tokens = read_tokens(self.folder)
        except OSError as error:
            log.error(
                "the reader tokens in %s could not be read (%s); the last ones read stay",
                self.folder,
                error.strerror,
            )
        self.read_at = self.clock()
