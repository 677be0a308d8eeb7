"""An event on a tenant's topic belongs to that tenant: the broker's ACLs decide who writes
there, so a `tenant` field can only agree with the topic, never choose another tenant."""

from __future__ import annotations

from typing import Any

from stallwatch.contract.parse import InvalidEvent

# The events that name a tenant: a run's start (its tenant for the fleet's counts and quotas)
# and an advisory (the tenant whose runs it concerns).
_NAMING = frozenset(("run_started", "fleet_advisory"))


def claim_for_tenant(event: dict[str, Any], tenant: str) -> None:
    """Give `event`, read from `tenant`'s events topic, that tenant; an event naming another is
    a forgery (or a runtime set up for the wrong tenant) and is refused. Its text is not quoted
    back: it is the sender's."""
    if event["type"] not in _NAMING:
        return
    named = event.get("tenant")
    if named is None:
        event["tenant"] = tenant
    elif named != tenant:
        raise InvalidEvent(
            "tenant_mismatch",
            f"the event names another tenant than its topic's "
            f"({tenant}); a tenant's events topic holds that tenant's runs only",
        )
