"""The checked-in JSON Schemas are exactly what the models generate."""

from __future__ import annotations

from pathlib import Path

from stallwatch.contract.schema import render, schemas

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"


def test_checked_in_schemas_match_the_models():
    expected = schemas()
    on_disk = {p.name for p in SCHEMA_DIR.glob("*.schema.json")}
    assert on_disk == set(expected), "run `make schemas` and commit the result"
    for name, schema in expected.items():
        assert (SCHEMA_DIR / name).read_bytes() == render(schema), (
            f"schemas/{name} drifted from the models: run `make schemas` and commit the result"
        )


def test_the_event_schema_knows_every_event_type():
    events = schemas()["events.v1.schema.json"]
    assert set(events["discriminator"]["mapping"]) == {
        "run_started",
        "round_started",
        "call_proposed",
        "call_result",
        "round_ended",
        "run_ended",
        "fleet_advisory",
    }
