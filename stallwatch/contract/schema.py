"""JSON Schema of the contract, generated from the models, for runtimes in other languages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from stallwatch.contract.commands import COMMAND_ADAPTER, DeadLetter
from stallwatch.contract.events import EVENT_ADAPTER
from stallwatch.contract.incidents import Incident


def schemas() -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema document."""
    docs = {
        "events.v1.schema.json": (
            "stallwatch event, contract v1",
            EVENT_ADAPTER.json_schema(mode="validation"),
        ),
        "commands.v1.schema.json": (
            "stallwatch command, contract v1",
            COMMAND_ADAPTER.json_schema(mode="serialization"),
        ),
        "deadletter.v1.schema.json": ("stallwatch dead letter, contract v1", DeadLetter.model_json_schema()),
        "incidents.v1.schema.json": (
            "stallwatch fleet incident, the incidents topic",
            Incident.model_json_schema(),
        ),
    }
    return {
        name: {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **schema}
        for name, (title, schema) in docs.items()
    }


def render(schema: dict[str, Any]) -> bytes:
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def main(write_dir: str | None) -> int:
    for name, schema in schemas().items():
        if write_dir:
            Path(write_dir, name).write_bytes(render(schema))
            print(f"wrote {Path(write_dir, name)}")
        else:
            print(render(schema).decode())
    return 0
