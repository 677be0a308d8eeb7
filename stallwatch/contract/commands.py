"""Commands the detector answers with (contract v1), and the dead-letter record.

Commands are plain dataclasses (neither frozen nor slotted: both make building or encoding
them several times slower, measured). orjson writes them natively; pydantic validates them
(in the client) and generates their JSON Schema through COMMAND_ADAPTER.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from xxhash import xxh3_128_hexdigest

from stallwatch.contract.digests import digest
from stallwatch.contract.limits import DEADLETTER_ERROR_CHARS, DEADLETTER_RAW_BYTES
from stallwatch.contract.stop_codes import StopAction, StopCode

RefusalCode = Literal[
    "duplicate_call",
    "repeated_call",
    "repeated_cycle",
    "run_stopped",
    "budget_exhausted",
    "fleet_incident",  # addition to v1: the run's `fleet_breaker` refused the tool
]


@dataclass(kw_only=True)
class _Command:
    """What every command carries: the contract version, its id, its run, its cause."""

    v: Literal[1] = 1
    command_id: str  # its cause and content (content_id): a command sent twice has the same id
    run_id: str
    caused_by: str  # the event_id of the event that caused it
    round: int


@dataclass(kw_only=True)
class Verdict(_Command):
    """The answer to one `call_proposed`: run it or not, and words for the model."""

    type: Literal["verdict"] = "verdict"
    call_id: str
    decision: Literal["allow", "refuse"]
    code: RefusalCode | None
    reason: str
    tool: str | None = None  # addition to v1: the proposed call's tool, for operators' views
    # Addition to v1, observe-only runs: the refusal the run would have had. The decision is then
    # `allow` (a runtime that ignores these fields runs the call, as observe-only means).
    would_code: RefusalCode | None = None
    would_reason: str | None = None


@dataclass(kw_only=True)
class Stop(_Command):
    """The end of a run's tool use; at most one per run."""

    type: Literal["stop"] = "stop"
    code: StopCode
    action: StopAction
    reason: str
    detail: dict[str, Any]


@dataclass(kw_only=True)
class Nudge(_Command):
    """A word to the model before a stop: nothing new for a while. Changes no counter."""

    type: Literal["nudge"] = "nudge"
    reason: str
    detail: dict[str, Any]


@dataclass(kw_only=True)
class WouldStop(_Command):
    """Addition to v1: the stop an observe-only run would have had, for operators; a runtime
    never acts on it (a v1 runtime ignores a type it does not know)."""

    type: Literal["would_stop"] = "would_stop"
    code: StopCode
    action: StopAction
    reason: str
    detail: dict[str, Any]


@dataclass(kw_only=True)
class WouldNudge(_Command):
    """Addition to v1: the nudge an observe-only run would have had; never shown to the model."""

    type: Literal["would_nudge"] = "would_nudge"
    reason: str
    detail: dict[str, Any]


Command = Verdict | Stop | Nudge | WouldStop | WouldNudge
COMMAND_ADAPTER: TypeAdapter[Command] = TypeAdapter(
    Annotated[Verdict | Stop | Nudge | WouldStop | WouldNudge, Field(discriminator="type")]
)


# A verdict's fields but an observe-only run's `would_code` and `would_reason`, which are written
# only when set: every other verdict keeps the bytes and id the release before gives it, since a
# rolling update mixes releases on one commands topic, and readers keep one content per id.
_PLAIN_VERDICT_FIELDS = tuple(f.name for f in fields(Verdict) if f.name not in ("would_code", "would_reason"))


def _wire(command: Command) -> Any:
    if type(command) is Verdict and command.would_code is None and command.would_reason is None:
        return {name: getattr(command, name) for name in _PLAIN_VERDICT_FIELDS}
    return command


def encode_command(command: Command) -> bytes:
    """The wire form of a command: one JSON object, fields in declaration order."""
    return orjson.dumps(_wire(command))


def content_id(command: Command) -> str:
    """A command's id: 24 hex digits of the XXH3-128 of the command as it stands, its cause's id
    (run, event, index) in `command_id` and everything it says. A redelivered event answered
    again gets the same id only when the answer is the same, so a reader keyed by command id
    never holds two contents under one id."""
    return xxh3_128_hexdigest(orjson.dumps(_wire(command)))[:24]


def decode_command(raw: bytes | str) -> Command:
    """Parse and validate a command, as a runtime receives it."""
    return COMMAND_ADAPTER.validate_python(orjson.loads(raw))


class DeadLetter(BaseModel):
    """Input that could not be applied: a specific error, where it was (topic, partition,
    offset), its size and a keyed digest of its bytes to match it with the record. The raw
    input itself only when asked for (`keep_raw`, STALLWATCH_DEADLETTER_RAW): an event that
    fails on one field may carry an API key in another, and a dead-letter topic is read by
    more people than the events topic. Kept, it is cut at DEADLETTER_RAW_BYTES and marked."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    error: str
    raw: str  # "" unless `raw_kept`
    topic: str
    partition: int
    offset: int
    # Additions to v1: the input's full size, whether `raw` holds only its start, and a digest
    # of the full input (null for a tombstone), to match a letter with the record: XXH3-128,
    # keyed like every fingerprint when the fleet has a key (unkeyed, a secret past the cut was
    # recovered by hashing guesses of the whole input).
    raw_size: int = 0
    raw_truncated: bool = False
    raw_digest: str | None = None
    # Whether `raw` holds the input (its start): false unless the setting asks for it.
    raw_kept: bool = False

    @classmethod
    def of(
        cls,
        raw: bytes | str | None,
        error: str,
        topic: str,
        partition: int,
        offset: int,
        secret: bytes | None = None,
        keep_raw: bool = False,
    ) -> DeadLetter:
        """`secret`: the fleet's fingerprint key (`secret_from_key`); None, unkeyed. `keep_raw`:
        copy the input's start into `raw` (bytes that are not UTF-8 become backslash escapes;
        None, a tombstone, becomes ""); otherwise `raw` is ""."""
        data = b"" if raw is None else raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
        kept = data[:DEADLETTER_RAW_BYTES] if keep_raw else b""
        if len(error) > DEADLETTER_ERROR_CHARS:
            error = error[:DEADLETTER_ERROR_CHARS] + "…"
        return cls(
            error=error,
            raw=kept.decode("utf-8", "backslashreplace"),
            topic=topic,
            partition=partition,
            offset=offset,
            raw_size=len(data),
            raw_truncated=keep_raw and len(kept) < len(data),
            raw_digest=None if raw is None else digest(data, secret).hex(),
            raw_kept=keep_raw,
        )

    def encode(self) -> bytes:
        return orjson.dumps(self.model_dump())


class ConflictingCommand(ValueError):
    """Two different contents under one command id: what no worker may ever publish."""


# Command ids a long-lived reader (`stallwatch top`) remembers: a copy published again comes
# within the batches a worker had not committed when it stopped, never this far behind.
FIRST_COPIES_KEPT = 1_000_000


class FirstCopies:
    """What every reader of the commands topic does (docs/contract.md, "Command ids"):
    keep the first copy of each command id, drop a later copy with the same bytes (a command
    published ahead of its batch's transaction is published again by whoever reads the batch
    again), and refuse one with different bytes (ConflictingCommand). Remembers a digest per
    id, the newest `limit` ids."""

    def __init__(self, limit: int = FIRST_COPIES_KEPT) -> None:
        self.limit = limit
        self._digests: dict[str, str] = {}  # command id -> digest of its first copy, oldest first

    def first(self, command_id: str, raw: bytes) -> bool:
        """True for the first copy of `command_id`, False for a same-bytes repeat."""
        digest_of = xxh3_128_hexdigest(raw)
        kept = self._digests.get(command_id)
        if kept is not None:
            if kept != digest_of:
                raise ConflictingCommand(f"two different commands share id {command_id}")
            return False
        self._digests[command_id] = digest_of
        if len(self._digests) > self.limit:
            del self._digests[next(iter(self._digests))]
        return True
