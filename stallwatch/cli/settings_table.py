"""`stallwatch settings`: every declared setting, as the process reads it or as the tables of
docs/operations.md (generated between marker comments, so the declarations stay the one copy)."""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic_core import PydanticUndefined

from stallwatch.cli.plugins import settings_classes
from stallwatch.settings import Declared, LogSettings, ServeSettings, Settings, bounds, choices, types_in

# Every settings class, in the order the documentation shows them: the installed plugins' (the
# fleet app's, with stallwatch-streams) between the logs' and the server's.
DECLARED: tuple[type[Declared], ...] = (Settings, LogSettings, *settings_classes(), ServeSettings)
_BLOCK = re.compile(r"(<!-- settings table: (\w+) -->\n).*?(<!-- end of settings table -->)", re.S)


def declared_names() -> dict[str, tuple[type[Declared], str]]:
    """Every declared environment variable: its class and field."""
    return {cls.env_name(field): (cls, field) for cls in DECLARED for field in cls.declared()}


# Variables of the local broker's scripts (deploy/kafka/), not of stallwatch's processes.
BROKER_SCRIPT_PREFIXES = ("STALLWATCH_KAFKA_", "STALLWATCH_CLUSTER_")


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One warning per STALLWATCH_* variable no setting reads (a misspelt one is otherwise
    ignored in silence), with the closest declared name."""
    known = declared_names()
    warnings = []
    for name in sorted(environ):
        if not name.startswith("STALLWATCH_") or name in known or name.startswith(BROKER_SCRIPT_PREFIXES):
            continue
        closest = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" (did you mean {closest[0]}?)" if closest else ""
        warnings.append(f"{name} is not a setting of stallwatch's and is ignored{hint}")
    return warnings


def accepts(cls: type[Declared], field: str) -> str:
    """What a setting's variable accepts, in words (the table's second column)."""
    info = cls.model_fields[field]
    names = {getattr(t, "__name__", "") for t in types_in(info.annotation)}
    if cls.is_secret(field):
        kind = "secret text"
    elif choices(info):
        kind = "one of " + ", ".join(f"`{c}`" for c in choices(info))
    elif "bool" in names:
        kind = "`true` or `false`"
    elif "int" in names:
        kind = "integer"
    elif "float" in names:
        kind = "number"
    else:
        kind = "text"
    limits = bounds(info)
    return f"{kind}, {limits}" if limits else kind


def default_of(cls: type[Declared], field: str) -> str:
    """A setting's default as the table shows it: a secret's never (it has none to show)."""
    info = cls.model_fields[field]
    value = info.default if info.default is not PydanticUndefined else None
    if value is None:
        return "unset"
    if cls.is_secret(field):
        return "set (secret)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def table(cls: type[Declared]) -> str:
    rows = ["| variable | accepts | default | what |", "|---|---|---|---|"]
    for field, info in cls.declared().items():
        what = (info.description or "").replace("|", "\\|")
        rows.append(
            f"| `{cls.env_name(field)}` | {accepts(cls, field)} | {default_of(cls, field)} | {what} |"
        )
    return "\n".join(rows) + "\n"


def with_tables(document: str) -> str:
    """`document` with each marked block replaced by the table of the class its marker names."""
    by_name = {cls.__name__: cls for cls in DECLARED}

    def replaced(match: re.Match[str]) -> str:
        cls = by_name.get(match.group(2))
        if cls is None:
            raise SystemExit(
                f"stallwatch settings: no settings class {match.group(2)!r} (one of {', '.join(by_name)})"
            )
        return f"{match.group(1)}{table(cls)}{match.group(3)}"

    return _BLOCK.sub(replaced, document)


def effective(out: Any = sys.stdout) -> None:
    """Each variable and the value this process reads (secrets only as set or unset)."""
    for values in (cls.from_env() for cls in DECLARED):
        for field in type(values).declared():
            value = getattr(values, field)
            if type(values).is_secret(field):
                value = "unset" if value is None else "set (secret)"
            out.write(f"{type(values).env_name(field)}={'' if value is None else value}\n")


def main(markdown: bool, write: str | None) -> int:
    if write:
        path = Path(write)
        text = path.read_text()
        new = with_tables(text)
        if new != text:
            path.write_text(new)
        return 0
    if markdown:
        sys.stdout.write(
            "\n".join(
                f"<!-- settings table: {cls.__name__} -->\n{table(cls)}<!-- end of settings table -->\n"
                for cls in DECLARED
            )
        )
        return 0
    effective()
    return 0
