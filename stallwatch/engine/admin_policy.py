"""The administrator's tool policy file: which tools require approval, by name or glob."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from stallwatch.contract.globs import glob_matches
from stallwatch.settings import Settings, SetupError


@dataclass(frozen=True)
class AdminPolicy:
    """Tool declarations the administrator adds to every run's own, e.g. from

    ```toml
    [tools]
    requires_approval = ["send_email", "db_write_*"]
    repeat_exempt = ["wait_for_*"]
    ```
    """

    approval_patterns: tuple[str, ...] = ()
    exempt_patterns: tuple[str, ...] = ()
    # Observe-only (the policy's `observe_only`) for every run of the deployment, or of these
    # tenants (STALLWATCH_OBSERVE_ONLY, STALLWATCH_OBSERVE_ONLY_TENANTS).
    observe_only: bool = False
    observe_only_tenants: frozenset[str] = frozenset()

    @classmethod
    def of(cls, settings: Settings) -> AdminPolicy:
        """The policy file's tool declarations and the settings' observe-only."""
        return replace(
            cls.from_file(settings.policy_file),
            observe_only=settings.observe_only,
            observe_only_tenants=frozenset(settings.observe_only_tenants),
        )

    @classmethod
    def from_file(cls, path: str | Path | None) -> AdminPolicy:
        """The policy in `path` (STALLWATCH_POLICY_FILE), or the empty policy without one."""
        return cls.load(path) if path else cls()

    @classmethod
    def load(cls, path: str | Path) -> AdminPolicy:
        """A file that cannot be read or parsed is an error naming STALLWATCH_POLICY_FILE: a
        worker that started without the administrator's policy would let through what it forbids."""
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as exc:
            raise SetupError(
                f"STALLWATCH_POLICY_FILE={str(path)!r}: cannot read it ({exc.strerror}); "
                "point it at the policy's TOML file, or unset it for no policy"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise SetupError(f"STALLWATCH_POLICY_FILE={str(path)!r}: not valid TOML ({exc})") from None
        tools = data.get("tools", {})
        if not isinstance(tools, dict):
            raise SetupError(f"STALLWATCH_POLICY_FILE={str(path)!r}: [tools] must be a table")
        return cls(
            approval_patterns=_patterns(tools, "requires_approval", path),
            exempt_patterns=_patterns(tools, "repeat_exempt", path),
        )

    def observes(self, tenant: str | None) -> bool:
        """Whether a run of `tenant` is observe-only whatever its own policy says."""
        return self.observe_only or (tenant is not None and tenant in self.observe_only_tenants)

    def requires_approval(self, tool: str) -> bool:
        return bool(self.approval_patterns) and _matches(tool, self.approval_patterns)

    def repeat_exempt(self, tool: str) -> bool:
        return bool(self.exempt_patterns) and _matches(tool, self.exempt_patterns)


def _patterns(tools: dict[str, Any], key: str, path: str | Path) -> tuple[str, ...]:
    value = tools.get(key, [])
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise SetupError(
            f"STALLWATCH_POLICY_FILE={str(path)!r}: tools.{key} must be a list of tool names or globs"
        )
    return tuple(value)


# Bounded, since tool names come from untrusted events; names repeat, so hits are the rule.
@lru_cache(maxsize=4096)
def _matches(tool: str, patterns: tuple[str, ...]) -> bool:
    return any(glob_matches(tool, p) for p in patterns)
