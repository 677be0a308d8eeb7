"""The detector: applies one event to one run's state and returns the commands it causes.

Pure: no I/O, no clock (time is the events' `ts`). Events are the validated dicts that
`stallwatch.contract.parse` returns. The detector keeps a run's lifecycle (rounds, redeliveries,
the call budget, the end); its mode's rules (`stallwatch.engine.rules`, one method per loop)
say what each call and result means.
"""

from __future__ import annotations

from typing import Literal, overload

from xxhash import xxh3_64_intdigest

from stallwatch.contract.commands import Command
from stallwatch.contract.events import RawEvent
from stallwatch.contract.limits import bounded_id
from stallwatch.contract.policy import policy_defaults
from stallwatch.engine import words
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import call_signature
from stallwatch.engine.digests import fingerprint_digest, tool_spec
from stallwatch.engine.observe import would_have
from stallwatch.engine.rules import RULES_BY_MODE
from stallwatch.engine.rules.base import Rules, nudge, verdict
from stallwatch.engine.state import EVENT_WINDOW, RunPolicy, RunState

# Events that belong to the open round only: one of a round closed already is a redelivery
# that came after the window of recent ids (a runtime's rounds only go up). Applied, a round-1
# call redelivered after 600 events was refused as a duplicate of itself (or run_stopped) and
# counted in the open round; an old round_ended closed the open round early.
_OF_A_ROUND = frozenset({"call_proposed", "round_ended"})


class Detector:
    """Applies the rules of contract v1 to one run's state at a time."""

    def __init__(
        self,
        admin_policy: AdminPolicy | None = None,
        secret: bytes | None = None,
        advisory_key: bytes | None = None,
    ) -> None:
        """`secret`: the key of every digest (`canonical.derive_secret` of
        STALLWATCH_FINGERPRINT_KEY), shared with the runtimes; None for unkeyed digests.
        `advisory_key`: the fleet app's key (`advisories.advisory_key` of
        STALLWATCH_ADVISORY_KEY); with it, an advisory read from a record counts only when the
        fleet app signed it."""
        self.admin_policy = admin_policy or AdminPolicy()
        self.secret = secret
        self.advisory_key = advisory_key
        self.rules: dict[str, Rules] = {
            mode: rules(self.admin_policy, secret) for mode, rules in RULES_BY_MODE.items()
        }

    def apply(self, state: RunState | None, event: RawEvent) -> tuple[RunState | None, list[Command]]:
        """Apply one event. `state` is None for a run not seen yet; the state is changed in place.

        Each command's id digests its cause and its whole content (`content_id`, given as each
        command is built: `rules.base`), so one id never carries two contents at any distance: an
        event redelivered after its run's state expired, or beyond the window of recent ids, is
        either recognised or answered under an id of its own (docs/contract.md,
        "Command ids")."""
        state, out = self._apply(state, event)
        if out and state is not None and state.policy.observe_only:
            out = [would_have(command) for command in out]
        return state, out

    def _apply(self, state: RunState | None, event: RawEvent) -> tuple[RunState | None, list[Command]]:
        out: list[Command] = []
        kind = event["type"]
        if state is None:
            if kind == "run_started":
                state = self._start(event)
            elif kind == "call_proposed":
                # Fail open, as the client does on a timeout: no record, no grounds to refuse.
                verdict(out, event, "allow", None, words.unknown_run())
            return state, out
        # `state.seen_event` in line (a call less on every event, on the hot path)
        event_ids = state.event_ids
        key = xxh3_64_intdigest(event["event_id"].encode())
        if key in event_ids:
            return state, out  # a redelivery: no further effect, before the run's end or after
        event_ids[key] = None
        if len(event_ids) > EVENT_WINDOW:
            state.forget_old_events()
        if state.quarantined:
            if kind == "run_ended":
                state.release()  # its place and its memory go, as for any run that ends
            return state, self.quarantined_verdict(event) if kind == "call_proposed" else out
        if kind == "fleet_advisory":  # before the clock: an advisory never moves run time
            self._on_advisory(state, event, out)
            return state, out
        if kind in _OF_A_ROUND and event["round"] < state.round:
            return state, out  # of a round closed already: a redelivery beyond the window of ids
        state.last_ts = ts = event["ts"]
        if state.ended:
            if kind == "call_proposed":
                verdict(out, event, "refuse", "run_stopped", words.run_stopped("The run has ended."))
            return state, out
        self._on_live_run(state, event, kind, ts, out)
        return state, out

    def _on_live_run(
        self, state: RunState, event: RawEvent, kind: str, ts: float, out: list[Command]
    ) -> None:
        """An event of a run not ended, not a redelivery: its time limit, then its lifecycle."""
        rules = self.rules[state.mode]
        if (time_limit := state.policy.time_limit_s) is not None and state.stop_code is None:
            rules.time_limit(state, event, ts, time_limit, out)
        if kind == "call_proposed":
            self._on_call(rules, state, event, out)
        elif kind == "call_result":
            self._on_result(rules, state, event, out)
        elif kind == "round_started":
            self._enter_round(rules, state, event, event["round"], out)
        elif kind == "round_ended":
            self._enter_round(rules, state, event, event["round"], out)
            self._close_round(rules, state, event, out)
        elif kind == "run_ended":
            state.release()
        # A second run_started changes nothing.

    @overload
    def quarantine(self, state: RunState | None, event: RawEvent, hold: Literal[True]) -> RunState: ...

    @overload
    def quarantine(self, state: RunState | None, event: RawEvent, hold: bool = False) -> RunState | None: ...

    def quarantine(self, state: RunState | None, event: RawEvent, hold: bool = False) -> RunState | None:
        """The run after the engine failed on `event`: marked quarantined (its state may be half
        changed, so nothing of it is judged again), or, for a run_started, a new quarantined run
        that holds its id. None for any other event of a run not seen, unless `hold` (a run whose
        stored state cannot be read: a new quarantined run holds its id, so that its later calls
        are allowed as quarantined, not as an unknown run's, with one dead letter only)."""
        if state is None:
            if event["type"] != "run_started" and not hold:
                return None
            state = RunState(
                mode=event.get("mode", "researcher"),
                started_ts=event["ts"],
                last_ts=event["ts"],
                tenant=self.tenant_of(event),
            )
            state.seen_event(xxh3_64_intdigest(event["event_id"].encode()))
        state.quarantined = True
        return state

    def tenant_of(self, event: RawEvent) -> str | None:
        """A run_started's tenant as its state keeps it: bounded like an id."""
        tenant = event.get("tenant")
        return None if tenant is None else bounded_id(tenant, self.secret)

    def quarantined_verdict(self, event: RawEvent) -> list[Command]:
        """What a quarantined run's call gets: allowed, since nothing of the run is judged."""
        out: list[Command] = []
        verdict(out, event, "allow", None, words.quarantined())
        return out

    # -- run and round lifecycle ------------------------------------------------------------

    def _start(self, event: RawEvent) -> RunState:
        mode = event["mode"]
        tools = event.get("tools") or []
        state = RunState(
            mode=mode,
            started_ts=event["ts"],
            last_ts=event["ts"],
            tenant=self.tenant_of(event),
            # The mode's defaults, then the run's own (validated by the parser), then the
            # administrator's observe-only, which a run cannot unset.
            policy=self._policy(mode, event),
            exempt_tools=[t["name"] for t in tools if t.get("repeat_exempt")],
            approval_tools=[t["name"] for t in tools if t.get("requires_approval")],
            tool_specs={
                t["name"]: tool_spec(t)
                for t in tools
                if t.get("volatile_fields") or t.get("facts") or t.get("volatile_patterns") is not None
            },
        )
        self.rules[mode].start(state, tools)
        state.seen_event(xxh3_64_intdigest(event["event_id"].encode()))
        return state

    def _policy(self, mode: str, event: RawEvent) -> RunPolicy:
        fields = {**policy_defaults(mode), **(event.get("policy") or {})}
        if self.admin_policy.observes(event.get("tenant")):
            fields["observe_only"] = True
        return RunPolicy(**fields)

    def _enter_round(
        self, rules: Rules, state: RunState, event: RawEvent, number: int, out: list[Command]
    ) -> None:
        """Open round `number`, closing the open one first when a runtime skipped its round_ended."""
        if number <= state.round:
            return
        if state.round_open:
            self._close_round(rules, state, event, out)
        state.round = number
        state.round_open = True
        state.round_proposed = state.round_allowed = state.round_results = 0
        state.round_new_fact = state.round_exempt_overloaded = False

    def _close_round(self, rules: Rules, state: RunState, event: RawEvent, out: list[Command]) -> None:
        if not state.round_open:
            return
        state.round_open = False
        if state.round_exempt_overloaded:
            state.extra_rounds += 1
        if state.stop_code is not None:
            return
        rules.close_round(state, event, out)

    # -- calls and results --------------------------------------------------------------------

    def _on_call(self, rules: Rules, state: RunState, event: RawEvent, out: list[Command]) -> None:
        self._enter_round(rules, state, event, event["round"], out)
        state.round_proposed += 1
        tool = event["tool"]
        if state.stop_code is not None:
            reason = words.run_stopped(words.stop_reason_short(state.stop_code))
            verdict(out, event, "refuse", "run_stopped", reason)
            return
        if state.fleet_incidents and tool in state.fleet_incidents:
            # Not the tool's failure in this run: no chat failure count, no budget charged.
            verdict(out, event, "refuse", "fleet_incident", words.fleet_refused(tool))
            return
        signature: bytes | None
        if (given := event.get("args_digest")) is not None:  # the runtime hashed its arguments
            signature = fingerprint_digest(given, self.secret)
        else:
            signature = call_signature(tool, event.get("args"), self.secret)
        budget = state.policy.call_budget
        if budget is not None and state.executed_calls >= budget:
            verdict(out, event, "refuse", "budget_exhausted", words.budget_exhausted(budget))
            rules.refused(state, event, tool, out)
        elif (
            refusal := rules.refusal(state, event, tool, signature, rules.repeat_exempt(state, tool))
        ) is not None:
            verdict(out, event, "refuse", *refusal)
            rules.refused(state, event, tool, out)
        else:
            rules.allow(state, event, signature)
            state.round_allowed += 1
            state.executed_calls += 1
            verdict(out, event, "allow", None, words.ALLOWED)

    # -- the fleet ---------------------------------------------------------------------------

    def _on_advisory(self, state: RunState, event: RawEvent, out: list[Command]) -> None:
        """An incident seen across runs: one nudge per incident for a live run, and
        under `fleet_breaker` the tool of an open `tool_failing` incident refused until it closes.
        Changes no streak, counter or clock."""
        if state.ended or state.stop_code is not None:
            return  # tools are gone already: nothing to tell
        if event.get("tenant") != state.tenant:
            return  # an incident of another tenant's tool: nothing of this run
        incident, tool = event["incident_id"], event["tool"]
        if event["incident"] == "closed":
            if state.fleet_incidents.get(tool) == incident:
                del state.fleet_incidents[tool]
            return
        if state.policy.fleet_breaker and event["kind"] == "tool_failing":
            state.open_fleet_incident(tool, incident)
        if not state.advise(incident):
            return
        evidence = event.get("evidence") or {}
        nudge(
            out,
            event,
            state.round,
            words.fleet_advisory(event["kind"], tool, evidence, event["window_s"]),
            {
                "incident_id": incident,
                "kind": event["kind"],
                "tool": tool,
                "window_s": event["window_s"],
                **evidence,
            },
        )

    def _on_result(self, rules: Rules, state: RunState, event: RawEvent, out: list[Command]) -> None:
        if state.stop_code is not None:
            return
        if event["status"] == "overloaded" and state.overloaded_exempted < state.policy.overloaded_exempt_max:
            # Rule 6: not charged to the budget, and the round limit grows for its round.
            state.overloaded_exempted += 1
            state.executed_calls -= 1
            state.round_exempt_overloaded = True
        rules.on_result(state, event, out)
