"""The fleet app for Faust's own command line: `faust -A stallwatch_streams.fleet.app worker -l info`."""

from __future__ import annotations

from stallwatch_streams.fleet.service import FleetService
from stallwatch_streams.fleet.settings import FleetSettings

service = FleetService(FleetSettings.from_env())
app = service.app
