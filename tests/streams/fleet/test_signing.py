"""With tenants on the cluster and no advisory key, the fleet app says so loudly, once a tenant."""

from __future__ import annotations

import logging

from stallwatch.contract.advisories import advisory_key
from stallwatch_streams.fleet.signing import warn_if_unsigned


def test_tenants_without_a_key_are_named_once_each(caplog):
    with caplog.at_level(logging.ERROR):
        warned = warn_if_unsigned({"acme"}, None, set())
        warned = warn_if_unsigned({"acme"}, None, warned)
        warned = warn_if_unsigned({"acme", "globex"}, None, warned)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and "(acme)" in errors[0] and "(globex)" in errors[1]
    assert "STALLWATCH_ADVISORY_KEY" in errors[0] and warned == {"acme", "globex"}


def test_a_key_or_no_tenants_says_nothing(caplog):
    with caplog.at_level(logging.ERROR):
        warn_if_unsigned({"acme"}, advisory_key("the fleet app's own advisory key"), set())
        warn_if_unsigned(set(), None, set())
    assert not [r for r in caplog.records if r.levelno == logging.ERROR]
