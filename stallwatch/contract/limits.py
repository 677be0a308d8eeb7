"""Size limits that keep every record stallwatch writes under the producer's limit, by construction."""

from __future__ import annotations

from stallwatch.contract.digests import digest

# The producer refuses a record over this many bytes: one oversized dead letter, verdict or
# state would crash every worker that read its input.
PRODUCER_MAX_BYTES = 1_000_000
# Every record stallwatch writes (command, dead letter, run state) stays under this: half
# of the producer's limit, margin for the key, the headers and the batch framing.
MAX_RECORD_BYTES = PRODUCER_MAX_BYTES // 2
# Ids and names copied from an event into a command or a state (run_id, event_id, call_id,
# tool): longer ones would let one event make every verdict of its run oversized, and a state
# holding many of them too large. Real ones are far shorter (uuids, the models' call ids and
# tool names are under 64 characters).
MAX_ID_CHARS = 128
# What a bounded id keeps of the original, for an operator reading the command.
_ID_PREFIX_CHARS = 64
_ID_MARK = "…#"
# A dead letter copies at most this much of the raw input (a 1 MB event of invalid UTF-8
# grows ~5x once escaped as JSON text).
DEADLETTER_RAW_BYTES = 16 * 1024
# A dead letter's error message: parser messages may quote input (an unknown type).
DEADLETTER_ERROR_CHARS = 2_000
# A run_started's declarations (its tools, their names, volatile fields and facts), as canonical
# JSON: they are kept in the run's state for the whole run.
MAX_DECLARATIONS_BYTES = 32 * 1024


def bounded_id(value: str, secret: bytes | None = None) -> str:
    """`value` itself when it is at most MAX_ID_CHARS long; otherwise its first characters, a
    mark and a digest of the whole, so that the same long id always maps to the same short one
    (the client applies this too, to match a verdict to its call). `secret`: the fleet's
    fingerprint key, so that what the cut hides cannot be guessed from the digest."""
    if len(value) <= MAX_ID_CHARS:
        return value
    whole = digest(value.encode("utf-8", "surrogatepass"), secret).hex()
    return f"{value[:_ID_PREFIX_CHARS]}{_ID_MARK}{whole}"


def bounded_key(key: bytes | None, secret: bytes | None = None) -> bytes | None:
    """A record key copied from input (a dead letter's original key), shortened the same way."""
    if key is None or len(key) <= MAX_ID_CHARS:
        return key
    return bounded_id(key.decode("utf-8", "backslashreplace"), secret).encode()
