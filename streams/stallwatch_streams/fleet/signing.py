"""Whether the fleet app's advisories are signed, said loudly where it matters: with tenants on
the cluster, an unsigned advisory is one any producer to an events topic could have written."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

UNSIGNED_WITH_TENANTS = (
    "STALLWATCH_ADVISORY_KEY is not set and tenants' topics exist (%s): advisories go out unsigned, "
    "so whoever can write a tenant's events topic can also advise, or lift a breaker on, that "
    "tenant's runs; set the same key on the fleet app and every worker"
)


def warn_if_unsigned(tenants: set[str], key: bytes | None, warned: set[str]) -> set[str]:
    """Log an error once for tenants found without an advisory key; returns the tenants warned
    about so far (the caller keeps them, so each tenant is named once)."""
    if key is not None:
        return warned
    new = tenants - warned
    if new:
        log.error(UNSIGNED_WITH_TENANTS, ", ".join(sorted(new)))
    return warned | tenants
