"""The fleet app's settings (STALLWATCH_FLEET_*), declared as stallwatch.settings declares the rest."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from stallwatch.settings import Declared, Port, Settings, SetupError


class FleetSettings(Declared):
    model_config = SettingsConfigDict(env_prefix="STALLWATCH_FLEET_")
    not_from_env: ClassVar[frozenset[str]] = frozenset({"base"})

    # The Kafka settings, read apart (STALLWATCH_*).
    base: Settings = Field(default_factory=Settings)
    # An incident is judged on the last `window_s`, refreshed every `step_s`.
    window_s: float = Field(
        300.0, ge=1.0, description="hopping windows of event time: their width (a whole number of steps)"
    )
    step_s: float = Field(60.0, ge=0.1, description="hopping windows of event time: their step")
    # Default: one window width, "a quiet window".
    quiet_s: float | None = Field(
        None,
        ge=0.0,
        description="an open incident closes once this much "
        "event time passed after the last window in which its rule held; "
        "unset: the window width",
    )
    failing_runs: int = Field(
        5,
        ge=1,
        description="`tool_failing`: at least this many distinct runs called the tool in a window ...",
    )
    failing_ratio: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="`tool_failing`: ... and at least this share of its calls failed (`error`, `overloaded`)",
    )
    same_answer_runs: int = Field(
        5, ge=2, description="`tool_same_answer`: one result fingerprint answered at least this many runs ..."
    )
    same_answer_args: int = Field(
        5, ge=2, description="`tool_same_answer`: ... for at least this many different argument digests"
    )
    looping_stops: int = Field(
        5,
        ge=1,
        description="`tool_looping`: at least this many runs stopped "
        "in a window with the tool named in the stop",
    )
    # Counted in stallwatch_fleet_evicted_keys_total; a flood of tool names cannot grow memory
    # without limit.
    max_keys: int = Field(
        50_000,
        ge=1,
        description="(tenant, tool) keys one fleet worker tracks; "
        "past it a new key evicts the least recently updated of its partition, "
        "whose open incidents close",
    )
    # So that one tenant's flood of tool names cannot evict the keys, and close the incidents, of
    # every other tenant.
    max_keys_per_tenant: int = Field(
        5_000,
        ge=1,
        description="keys one tenant may hold on one fleet "
        "worker; a tally of a new key past it is a dead letter "
        "(`key_quota`)",
    )
    # A key at its caps holds 1.16 MB, a tool called by a few runs a few KB (fleet/sizes.py).
    # The fleet pods' limit is 1 GiB: the app idles at ~70 MB, and a flood of keys adds their
    # estimate plus ~130 MB of its buffers (measured): ~720 MB with 512 MiB of keys.
    max_bytes: int = Field(
        512 << 20,
        ge=1 << 16,
        description="estimated bytes in memory of the (tenant, tool) keys one fleet worker "
        "holds; past it the least recently updated keys of the partition are evicted, quiet ones "
        "first, as at STALLWATCH_FLEET_MAX_KEYS",
    )
    # A quarter of the worker's: one tenant's flood of keys at their caps never takes the room of
    # the others, nor restarts the process serving them.
    max_bytes_per_tenant: int = Field(
        128 << 20,
        ge=1 << 16,
        description="estimated bytes in memory of one tenant's keys on one fleet worker; a "
        "tally of a new key past it is a dead letter (`memory_quota`), and past it the tenant's "
        "own least recently updated keys are evicted as its keys grow",
    )
    max_advised_runs: int = Field(
        64, ge=0, description="live runs told of one incident (`fleet_advisory` events)"
    )
    # Fewer, larger records for the judging step (or up to 1,000 tallies).
    merge_interval_s: float = Field(
        0.2,
        ge=0.001,
        description="tallies merged per key this long "
        "before re-keying; adds at most this much to an advisory's latency",
    )
    tick_interval_s: float = Field(
        1.0,
        ge=0.05,
        description="how often each worker tells every "
        "partition its event-time clock (closes incidents of tools no "
        "longer called)",
    )
    # Faust's own is 1,500 ms: every hop would cost that much.
    fetch_wait_ms: int = Field(10, ge=0, le=1500, description="the consumer's fetch wait")
    web_port: Port = Field(
        6067,
        description="port of the fleet worker's web view "
        "(`/incidents/`, `/metrics`) on STALLWATCH_WEB_BIND; one per worker process",
    )
    # A Secret mounted as a folder: docs/decisions.md, "The fleet app's incidents, listed per tenant".
    reader_tokens_dir: str | None = Field(
        None,
        description="folder of the tokens that read the incidents lists: a file named for each "
        "tenant holds the token of `/incidents/<tenant>/`, `shared.token` that of `/incidents/` "
        "(`Authorization: Bearer …`); unset: the lists answer only to loopback",
    )
    session_timeout_s: float = Field(
        10.0,
        ge=1.0,
        description="Kafka group session: a killed fleet "
        "worker's tools move to a live one after about this long",
    )

    @field_validator("reader_tokens_dir")
    @classmethod
    def _a_folder(cls, folder: str | None) -> str | None:
        """Named at start, before any connection: a mount that is missing closes every list."""
        if folder is not None and not Path(folder).is_dir():
            raise SetupError(
                f"STALLWATCH_FLEET_READER_TOKENS_DIR={folder} is not a folder this process can "
                "read: mount the reader tokens' Secret there, or unset it"
            )
        return folder

    @model_validator(mode="after")
    def _whole_steps(self) -> Self:
        # A whole number of steps, up to float rounding (1.2 / 0.1 is 11.999999999999998).
        steps = self.window_s / self.step_s
        if abs(steps - round(steps)) > 1e-9:
            raise SetupError(
                f"STALLWATCH_FLEET_WINDOW_S={self.window_s:g} is not a whole number of "
                f"STALLWATCH_FLEET_STEP_S={self.step_s:g}"
            )
        return self

    @property
    def quiet(self) -> float:
        return self.window_s if self.quiet_s is None else self.quiet_s

    @property
    def group_id(self) -> str:
        """Its own consumer group (also the Faust app id, prefix of its changelog topics)."""
        return f"{self.base.topic_prefix}-fleet"

    @classmethod
    def from_env(cls, base: Settings | None = None) -> FleetSettings:
        return cls._from_environment(base=base or Settings.from_env())
