"""The commands and settings another distribution gives the `stallwatch` command line, found
through entry points (the plugin idiom of pytest and flake8): stallwatch-streams registers
`worker`, `fleet` and the fleet app's settings, and stallwatch imports none of its code by name,
so the light install works without it and the two packages form no cycle."""

from __future__ import annotations

from collections.abc import Callable

from stallwatch.settings import Declared, Settings

COMMANDS = "stallwatch.commands"
SETTINGS = "stallwatch.settings"
# What to install for the commands stallwatch names but does not carry.
STREAMS_INSTALL = "pip install stallwatch-streams"


class MissingPlugin(Exception):
    """A command no installed distribution provides: the message says what to install."""


def command(name: str) -> Callable[[Settings], int]:
    """The entry point `name` of the commands group: a function of the settings to an exit code."""
    from importlib.metadata import entry_points  # here: every command imports this module

    found = entry_points(group=COMMANDS, name=name)
    if not found:
        raise MissingPlugin(f"`stallwatch {name}` needs the stream jobs: {STREAMS_INSTALL}")
    (point, *_) = found
    run: Callable[[Settings], int] = point.load()
    return run


def settings_classes() -> tuple[type[Declared], ...]:
    """The settings classes of the installed plugins, by entry point name (a stable order)."""
    from importlib.metadata import entry_points

    classes = []
    for point in sorted(entry_points(group=SETTINGS), key=lambda p: p.name):
        cls = point.load()
        if not (isinstance(cls, type) and issubclass(cls, Declared)):
            raise TypeError(f"entry point {point.name} = {point.value} of {SETTINGS} is no settings class")
        classes.append(cls)
    return tuple(classes)
