"""The fleet app for Faust's own command line: `faust -A streams.fleet.app worker -l info`."""

from __future__ import annotations

from streams.fleet.service import FleetService
from streams.fleet.settings import FleetSettings

service = FleetService(FleetSettings.from_env())
app = service.app
