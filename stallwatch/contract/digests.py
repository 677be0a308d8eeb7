"""The 16-byte digest behind every fingerprint, signature and digest stallwatch sends, keyed or not."""

from __future__ import annotations

from functools import lru_cache
from hashlib import blake2b

from xxhash import xxh3_128_digest

# 16 bytes (128 bits, XXH3-128) makes an accidental collision between two results of one
# run unthinkable while keeping each fingerprint held in a run's state small.
DIGEST_SIZE = 16
# Separates the key derived for fingerprints from any other use of the same secret text.
_KEY_PERSON = b"stallwatch-fp"


def derive_secret(key_text: str) -> bytes:
    """The 32-byte key behind every digest, from the shared secret text
    (STALLWATCH_FINGERPRINT_KEY), so that any length of text makes a full-size BLAKE2b key."""
    return blake2b(key_text.encode(), digest_size=32, person=_KEY_PERSON).digest()


def secret_from_key(key_text: str | None) -> bytes | None:
    """`derive_secret` of STALLWATCH_FINGERPRINT_KEY, or None (unkeyed digests) without one."""
    return derive_secret(key_text) if key_text else None


def digest(data: bytes, secret: bytes | None = None) -> bytes:
    """The 16-byte digest of `data`: XXH3-128, then, with a secret, keyed BLAKE2b of that.

    Unkeyed, a digest of a small value (`{"pin": "4821"}`) is reversed by hashing guesses; keyed,
    guessing needs the secret. BLAKE2b runs over the 16-byte XXH3 only, so a 2 KB result costs
    ~0.6 µs more instead of ~2.5 µs for BLAKE2b over the whole (measured); equal content still
    gives equal digests, which is all the rules compare.
    """
    inner = xxh3_128_digest(data)
    if secret is None:
        return inner
    keyed = _keyed(secret).copy()  # a copy of a keyed state: a third cheaper than a new one
    keyed.update(inner)
    return keyed.digest()


@lru_cache(maxsize=4)
def _keyed(secret: bytes) -> blake2b:
    return blake2b(key=secret, digest_size=DIGEST_SIZE)
