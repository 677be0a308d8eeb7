"""The fleet app's settings, from STALLWATCH_FLEET_* environment variables, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from stallwatch.settings import Settings, SetupError, _env, _number


@dataclass(frozen=True)
class FleetSettings:
    base: Settings = field(default_factory=Settings)
    # Hopping windows: width and step (seconds of event time). An incident is judged on the last
    # `window_s`, refreshed every `step_s`.
    window_s: float = 300.0
    step_s: float = 60.0
    # An open incident closes once this much event time passed after the last window in which
    # its rule held (default: one window width, "a quiet window").
    quiet_s: float | None = None
    # tool_failing: at least this many distinct runs called the tool in a window ...
    failing_runs: int = 5
    # ... and at least this share of its calls failed (`error`, `overloaded`).
    failing_ratio: float = 0.5
    # tool_same_answer: one result fingerprint answered at least this many runs ...
    same_answer_runs: int = 5
    # ... for at least this many different argument digests.
    same_answer_args: int = 5
    # tool_looping: at least this many runs stopped in a window with the tool named in the stop.
    looping_stops: int = 5
    # (tenant, tool) keys tracked by one fleet worker; beyond it a new key evicts the least
    # recently updated key of its partition, one without an open incident first (counted in
    # stallwatch_fleet_evicted_keys_total), so a flood of tool names cannot grow memory without
    # limit.
    max_keys: int = 50_000
    # Keys one tenant may hold on one fleet worker: a tally of a new (tenant, tool) key past it is
    # a dead letter (key_quota), so that one tenant's flood of tool names cannot evict the keys,
    # and close the incidents, of every other tenant.
    max_keys_per_tenant: int = 5_000
    # Live runs told of one incident (fleet_advisory events): a bound on what one incident writes.
    max_advised_runs: int = 64
    # The merge step gathers tallies this long (or up to 1,000) before re-keying them: fewer,
    # larger records for the judging step. Adds at most this much to an advisory's latency.
    merge_interval_s: float = 0.2
    # How often each worker tells every partition its event-time clock (what closes incidents
    # on tools that are no longer called).
    tick_interval_s: float = 1.0
    # Faust's consumer waits up to 1,500 ms for data per fetch: every hop would cost that much.
    fetch_wait_ms: int = 10
    # Port of the fleet worker's web view (/incidents/, /metrics); one port per worker process.
    web_port: int = 6067
    # Kafka group session: a killed worker's partitions move to a live one after about this long.
    session_timeout_s: float = 10.0

    @property
    def quiet(self) -> float:
        return self.window_s if self.quiet_s is None else self.quiet_s

    @property
    def group_id(self) -> str:
        """Its own consumer group (also the Faust app id, prefix of its changelog topics)."""
        return f"{self.base.topic_prefix}-fleet"

    @classmethod
    def from_env(cls, base: Settings | None = None) -> FleetSettings:
        base = base or Settings.from_env()
        window = _number("STALLWATCH_FLEET_WINDOW_S", cls.window_s, float, 1.0)
        step = _number("STALLWATCH_FLEET_STEP_S", cls.step_s, float, 0.1)
        # A whole number of steps, up to float rounding (1.2 / 0.1 is 11.999999999999998).
        if abs(window / step - round(window / step)) > 1e-9:
            raise SetupError(f"STALLWATCH_FLEET_WINDOW_S={window:g} is not a whole number of "
                             f"STALLWATCH_FLEET_STEP_S={step:g}")
        quiet = _env("STALLWATCH_FLEET_QUIET_S")
        return cls(
            base=base, window_s=window, step_s=step,
            quiet_s=None if quiet is None else _number("STALLWATCH_FLEET_QUIET_S", 0.0, float, 0.0),
            failing_runs=_number("STALLWATCH_FLEET_FAILING_RUNS", cls.failing_runs, int, 1),
            failing_ratio=_number("STALLWATCH_FLEET_FAILING_RATIO", cls.failing_ratio, float, 0.0, 1.0),
            same_answer_runs=_number("STALLWATCH_FLEET_SAME_ANSWER_RUNS", cls.same_answer_runs, int, 2),
            same_answer_args=_number("STALLWATCH_FLEET_SAME_ANSWER_ARGS", cls.same_answer_args, int, 2),
            looping_stops=_number("STALLWATCH_FLEET_LOOPING_STOPS", cls.looping_stops, int, 1),
            max_keys=_number("STALLWATCH_FLEET_MAX_KEYS", cls.max_keys, int, 1),
            max_keys_per_tenant=_number("STALLWATCH_FLEET_MAX_KEYS_PER_TENANT",
                                        cls.max_keys_per_tenant, int, 1),
            max_advised_runs=_number("STALLWATCH_FLEET_MAX_ADVISED_RUNS", cls.max_advised_runs, int, 0),
            merge_interval_s=_number("STALLWATCH_FLEET_MERGE_INTERVAL_S", cls.merge_interval_s, float, 0.001),
            tick_interval_s=_number("STALLWATCH_FLEET_TICK_INTERVAL_S", cls.tick_interval_s, float, 0.05),
            fetch_wait_ms=_number("STALLWATCH_FLEET_FETCH_WAIT_MS", cls.fetch_wait_ms, int, 0, 1500),
            web_port=_number("STALLWATCH_FLEET_WEB_PORT", cls.web_port, int, 0, 65535),
            session_timeout_s=_number("STALLWATCH_FLEET_SESSION_TIMEOUT_S", cls.session_timeout_s,
                                      float, 1.0),
        )
