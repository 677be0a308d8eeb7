"""An event on a tenant's topic belongs to that tenant: the broker's ACLs decide who writes
there, so a `tenant` field can only agree with the topic, never choose another tenant. The shared
topic is one tenant's too, the deployment's own (no name): an event there that names a tenant is
refused, since whoever may write the shared topic could otherwise speak for any tenant."""

from __future__ import annotations

from typing import Any

from stallwatch.contract.parse import InvalidEvent

# The events that name a tenant: a run's start (its tenant for the fleet's counts and quotas)
# and an advisory (the tenant whose runs it concerns).
_NAMING = frozenset(("run_started", "fleet_advisory"))


def claim_for_shared_topic(event: dict[str, Any]) -> None:
    """Refuse an event on the shared events topic that names a tenant: a tenant's runs and
    advisories are on its own topic, where the broker's ACLs say who writes."""
    if event["type"] in _NAMING and event.get("tenant") is not None:
        raise InvalidEvent(
            "tenant_on_shared_topic",
            "the event names a tenant on the shared events topic; a tenant's runs and advisories "
            "go to its own events topic (stallwatch tenants add)",
        )


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
