"""The detector: applies one event to one run's state and returns the commands it causes.

Pure: no I/O, no clock (time is the events' `ts`). Events are the validated dicts that
`stallwatch.contract.parse` returns. One method per loop it catches.
"""

from __future__ import annotations

from typing import Any

from xxhash import xxh3_64_intdigest, xxh3_128_hexdigest

from stallwatch.contract.commands import Command, Nudge, Stop, Verdict, content_id
from stallwatch.contract.policy import policy_defaults
from stallwatch.contract.stop_codes import STOPS
from stallwatch.engine import coder, words
from stallwatch.engine.admin_policy import AdminPolicy
from stallwatch.engine.canonical import (
    DIGEST_SIZE,
    call_signature,
    canonical_bytes,
    declared_view,
    digest,
    fact_digest,
    fingerprint,
    parse_json_text,
)
from stallwatch.engine.masks import effective_patterns
from stallwatch.engine.state import MAX_CHAT_HISTORY, RunState

Event = dict[str, Any]

_FAILED = frozenset({"error", "overloaded"})
# Events that belong to the open round only: one of a round closed already is a redelivery
# that came after the window of recent ids (a runtime's rounds only go up). Applied, a round-1
# call redelivered after 600 events was refused as a duplicate of itself (or run_stopped) and
# counted in the open round; an old round_ended closed the open round early.
_OF_A_ROUND = frozenset({"call_proposed", "round_ended"})
# Chat cycles of 2 to 4 calls; the history keeps enough for the longest at its threshold.
_CYCLE_LENGTHS = (2, 3, 4)


class Detector:
    """Applies the rules of contract v1 to one run's state at a time."""

    def __init__(self, admin_policy: AdminPolicy | None = None, secret: bytes | None = None) -> None:
        """`secret`: the key of every digest (`canonical.derive_secret` of
        STALLWATCH_FINGERPRINT_KEY), shared with the runtimes; None for unkeyed digests."""
        self.admin_policy = admin_policy or AdminPolicy()
        self.secret = secret

    def apply(self, state: RunState | None, event: Event) -> tuple[RunState | None, list[Command]]:
        """Apply one event. `state` is None for a run not seen yet; the state is changed in place.

        Each command's id digests its cause and its whole content (`content_id`), so one id never
        carries two contents at any distance: an event redelivered after its run's state expired,
        or beyond the window of recent ids, is either recognised or answered under an id of its
        own (docs/contract-additions.md, "Command ids")."""
        state, out = self._decide(state, event)
        for command in out:
            command.command_id = content_id(command)
        return state, out

    def _decide(self, state: RunState | None, event: Event) -> tuple[RunState | None, list[Command]]:
        out: list[Command] = []
        kind = event["type"]
        if state is None:
            if kind == "run_started":
                state = self._start(event)
            elif kind == "call_proposed":
                # Fail open, as the client does on a timeout: no record, no grounds to refuse.
                _verdict(out, event, "allow", None, words.unknown_run())
            return state, out
        if state.seen_event(xxh3_64_intdigest(event["event_id"].encode())):
            return state, out  # a redelivery: no further effect, before the run's end or after
        if kind == "fleet_advisory":  # before the clock: an advisory never moves run time
            self._on_advisory(state, event, out)
            return state, out
        if kind in _OF_A_ROUND and event["round"] < state.round:
            return state, out  # of a round closed already: a redelivery beyond the window of ids
        state.last_ts = ts = event["ts"]
        if state.ended:
            if kind == "call_proposed":
                _verdict(out, event, "refuse", "run_stopped", words.run_stopped("The run has ended."))
            return state, out
        if state.time_limit_s is not None and state.stop_code is None:
            self._time_limit(state, event, ts, out)
        if kind == "call_proposed":
            self._on_call(state, event, out)
        elif kind == "call_result":
            self._on_result(state, event, out)
        elif kind == "round_started":
            self._enter_round(state, event, event["round"], out)
        elif kind == "round_ended":
            self._enter_round(state, event, event["round"], out)
            self._close_round(state, event, out)
        elif kind == "run_ended":
            state.release()
        # A second run_started changes nothing.
        return state, out

    # -- run and round lifecycle ------------------------------------------------------------

    def _start(self, event: Event) -> RunState:
        policy = {**policy_defaults(event["mode"]), **(event.get("policy") or {})}  # validated by the parser
        tools = event.get("tools") or []
        state = RunState(
            mode=event["mode"], started_ts=event["ts"], last_ts=event["ts"], **policy,
            exempt_tools=[t["name"] for t in tools if t.get("repeat_exempt")],
            approval_tools=[t["name"] for t in tools if t.get("requires_approval")],
            tool_specs={t["name"]: _tool_spec(t) for t in tools
                        if t.get("volatile_fields") or t.get("facts")
                        or t.get("volatile_patterns") is not None},
        )
        if state.mode == "coder":
            state.tool_effects = {t["name"]: t["effect"] for t in tools
                                  if t.get("effect") in ("read", "write")}
        state.seen_event(xxh3_64_intdigest(event["event_id"].encode()))
        return state

    def _enter_round(self, state: RunState, event: Event, number: int, out: list[Command]) -> None:
        """Open round `number`, closing the open one first when a runtime skipped its round_ended."""
        if number <= state.round:
            return
        if state.round_open:
            self._close_round(state, event, out)
        state.round = number
        state.round_open = True
        state.round_proposed = state.round_allowed = state.round_results = 0
        state.round_new_fact = state.round_exempt_overloaded = False

    def _close_round(self, state: RunState, event: Event, out: list[Command]) -> None:
        if not state.round_open:
            return
        state.round_open = False
        if state.round_exempt_overloaded:
            state.extra_rounds += 1
        if state.stop_code is not None:
            return
        if state.mode != "chat":  # researcher and coder
            self._all_refused(state, event, out)
            self._no_new_facts(state, event, out)
        self._call_budget(state, event, out)
        self._round_limit(state, event, out)

    # -- calls ------------------------------------------------------------------------------

    def _on_call(self, state: RunState, event: Event, out: list[Command]) -> None:
        self._enter_round(state, event, event["round"], out)
        state.round_proposed += 1
        tool = event["tool"]
        if state.stop_code is not None:
            reason = words.run_stopped(words.stop_reason_short(state.stop_code))
            _verdict(out, event, "refuse", "run_stopped", reason)
            return
        if state.fleet_incidents and tool in state.fleet_incidents:
            # Not the tool's failure in this run: no chat failure count, no budget charged.
            _verdict(out, event, "refuse", "fleet_incident", words.fleet_refused(tool))
            return
        if (given := event.get("args_digest")) is not None:  # the runtime hashed its arguments
            signature = _fingerprint_digest(given, self.secret)
        else:
            signature = call_signature(tool, event.get("args"), self.secret)
        exempt = self._repeat_exempt(state, tool)
        if state.call_budget is not None and state.executed_calls >= state.call_budget:
            self._refuse(state, event, tool, "budget_exhausted", words.budget_exhausted(state.call_budget),
                         out)
        elif state.mode == "researcher" and self._duplicate_call(state, signature, exempt):
            self._refuse(state, event, tool, "duplicate_call", words.duplicate_call(tool), out)
        elif state.mode == "coder" and coder.is_duplicate(
                state, signature, effect := coder.effect_of(state, event), exempt):
            self._refuse(state, event, tool, "duplicate_call", words.duplicate_read(tool), out)
        elif state.mode == "chat" and self._repeated_call(state, signature, exempt):
            self._refuse(state, event, tool, "repeated_call", words.repeated_call(tool, state.repeat_count),
                         out)
        elif state.cycle_threshold is not None and state.mode == "chat" \
                and (cycle := self._repeated_cycle(state, signature, exempt)):
            self._remember_call(state, event, signature)
            self._refuse(state, event, tool, "repeated_cycle",
                         words.repeated_cycle(cycle, state.cycle_threshold), out)
        else:
            if state.cycle_threshold is not None and state.mode == "chat":
                self._remember_call(state, event, signature)
            if signature is not None and state.mode == "researcher":
                state.add_signature(signature)
            elif state.mode == "coder":
                coder.allow(state, event, signature, effect)
            state.round_allowed += 1
            state.executed_calls += 1
            _verdict(out, event, "allow", None, words.ALLOWED)

    def _refuse(self, state: RunState, event: Event, tool: str, code: str, reason: str,
                out: list[Command]) -> None:
        _verdict(out, event, "refuse", code, reason)
        if state.mode == "chat":  # chat rule 2: a refused call counts as a failure of its tool
            self._tool_failures(state, event, tool, out, refused=True)

    def _duplicate_call(self, state: RunState, signature: bytes | None, exempt: bool) -> bool:
        """Researcher rule 1: the same tool and arguments as a call already allowed to run."""
        return not exempt and signature is not None and signature in state.signatures

    def _repeated_call(self, state: RunState, signature: bytes | None, exempt: bool) -> bool:
        """Chat rule 1: the same call back to back, `loop_detect_threshold` times or more."""
        if signature is not None and signature == state.last_signature:
            state.repeat_count += 1
        else:
            state.last_signature = signature
            state.repeat_count = 1
        return not exempt and state.repeat_count >= state.loop_detect_threshold

    def _repeated_cycle(self, state: RunState, signature: bytes | None, exempt: bool) -> list[str]:
        """Chat, with `cycle_threshold`: the same 2 to 4 calls with the same results, again and
        again. Returns the cycle's tools when this call would go round once more."""
        if exempt or signature is None:
            return []
        history, times = state.chat_history, state.cycle_threshold
        for length in _CYCLE_LENGTHS:
            window = history[-length * times:]
            if len(window) < length * times or window[0][0] != signature.hex():
                continue
            block = window[:length]
            if len({entry[0] for entry in block}) < 2:
                continue  # one call repeated: the back-to-back rule's case
            if all(entry[1] is not None and entry[:2] == block[i % length][:2]
                   for i, entry in enumerate(window)):
                return [entry[3] for entry in block]
        return []

    def _remember_call(self, state: RunState, event: Event, signature: bytes | None) -> None:
        state.chat_history.append([signature.hex() if signature else None, None, event["call_id"],
                                   event["tool"]])
        del state.chat_history[:-min(max(_CYCLE_LENGTHS) * (state.cycle_threshold + 1),
                                     MAX_CHAT_HISTORY)]

    def _remember_result(self, state: RunState, event: Event) -> None:
        """Chat cycles compare results too: a poll whose answer changes is never a cycle."""
        for entry in reversed(state.chat_history):
            if entry[2] == event["call_id"]:
                if "result" in event:
                    try:
                        content = canonical_bytes(parse_json_text(event["result"]))
                    except ValueError:
                        return
                elif event.get("fingerprint") is not None:
                    content = event["fingerprint"].encode()
                else:
                    return  # no content: unknown, so never part of a cycle
                entry[1] = digest(event["status"].encode() + b"\x00" + content, self.secret).hex()
                return

    # -- the fleet ---------------------------------------------------------------------------

    def _on_advisory(self, state: RunState, event: Event, out: list[Command]) -> None:
        """An incident seen across runs (issue 13): one nudge per incident for a live run, and
        under `fleet_breaker` the tool of an open `tool_failing` incident refused until it closes.
        Changes no streak, counter or clock."""
        if state.ended or state.stop_code is not None:
            return  # tools are gone already: nothing to tell
        incident, tool = event["incident_id"], event["tool"]
        if event["incident"] == "closed":
            if state.fleet_incidents.get(tool) == incident:
                del state.fleet_incidents[tool]
            return
        if state.fleet_breaker and event["kind"] == "tool_failing":
            state.open_fleet_incident(tool, incident)
        if not state.advise(incident):
            return
        evidence = event.get("evidence") or {}
        out.append(Nudge(command_id=_command_id(event, 0), run_id=event["run_id"],
                         caused_by=event["event_id"], round=state.round,
                         reason=words.fleet_advisory(event["kind"], tool, evidence, event["window_s"]),
                         detail={"incident_id": incident, "kind": event["kind"], "tool": tool,
                                 "window_s": event["window_s"], **evidence}))

    # -- results ----------------------------------------------------------------------------

    def _on_result(self, state: RunState, event: Event, out: list[Command]) -> None:
        if state.stop_code is not None:
            return
        status = event["status"]
        if status == "overloaded" and state.overloaded_exempted < state.overloaded_exempt_max:
            # Rule 6: not charged to the budget, and the round limit grows for its round.
            state.overloaded_exempted += 1
            state.executed_calls -= 1
            state.round_exempt_overloaded = True
        if state.mode == "coder":
            self._on_coder_result(state, event, out)
            return
        if state.cycle_threshold is not None and state.mode == "chat":
            self._remember_result(state, event)
        if state.mode == "researcher":
            current = event["round"] == state.round and state.round_open
            if current:
                state.round_results += 1
            if self._brings_new_fact(state, event):
                _count_new_fact(state, current)
        if status in _FAILED:
            self._tool_failures(state, event, event["tool"], out)
        elif state.failures:
            state.failures.pop(event["tool"], None)  # a success resets its tool's count

    def _on_coder_result(self, state: RunState, event: Event, out: list[Command]) -> None:
        """Coder mode: new facts per call signature, failures of one call while nothing else
        changes, and stalls: one call's same result after changes made between its runs."""
        tool = event["tool"]
        current = event["round"] == state.round and state.round_open
        if current:
            state.round_results += 1
        spec = state.tool_specs.get(tool)
        patterns = effective_patterns("coder", spec.get("patterns") if spec else None)
        whole, facts, itemised, empty = _coder_digests(event, spec, patterns, self.secret)
        always_new = self._requires_approval(state, tool) or self._repeat_exempt(state, tool)
        judged = coder.on_result(state, event, whole, facts, itemised, always_new, empty)
        if judged is None or judged.new_fact:
            _count_new_fact(state, current)
        if judged is None:
            return
        if judged.failures >= state.no_progress_threshold:
            self._stop(state, event, "tool_failures", {
                "tool": tool, "consecutive_failures": judged.failures,
                "threshold": state.no_progress_threshold, "call": judged.label}, out)
        elif judged.stall_runs and state.stall_stop_at is not None \
                and judged.stall_runs >= state.stall_stop_at:
            self._stop(state, event, "no_effect", {
                "call": judged.label, "tool": tool, "same_result_runs": judged.stall_runs,
                "stall_stop_at": state.stall_stop_at}, out)
        elif judged.stall_runs and judged.stall_runs == state.stall_nudge_at:
            out.append(Nudge(command_id=_command_id(event, len(out)), run_id=event["run_id"],
                             caused_by=event["event_id"], round=event["round"],
                             reason=words.stall(judged.label, judged.stall_runs),
                             detail={"call": judged.label, "tool": tool,
                                     "same_result_runs": judged.stall_runs,
                                     "stall_nudge_at": state.stall_nudge_at,
                                     "workspace_version": state.workspace_version}))

    def _brings_new_fact(self, state: RunState, event: Event) -> bool:
        """Rule 3: unseen results are new, and so is anything empty, content-less or approved."""
        tool = event["tool"]
        if self._requires_approval(state, tool) or self._repeat_exempt(state, tool):
            return True
        digests = _result_digests(event, state.tool_specs.get(tool) if state.tool_specs else None,
                                  self.secret)
        if digests is None:
            return True
        new = False
        for found in digests:
            if state.add_fingerprint(found):
                new = True
        return new

    def _requires_approval(self, state: RunState, tool: str) -> bool:
        return tool in state.approval_tools or self.admin_policy.requires_approval(tool)

    def _repeat_exempt(self, state: RunState, tool: str) -> bool:
        return tool in state.exempt_tools or self.admin_policy.repeat_exempt(tool)

    # -- the stops, one per loop ----------------------------------------------------------------

    def _tool_failures(self, state: RunState, event: Event, tool: str, out: list[Command],
                       refused: bool = False) -> None:
        """Rule 5 (chat rule 2): one tool failing again and again. A success resets its count
        where results arrive (`_on_result`). `refused`: the call that reached the limit was
        refused, not failed (the stop's words must not say the tool failed)."""
        count = state.count_failure(tool)
        if count >= state.no_progress_threshold and state.stop_code is None:
            detail = {"tool": tool, "consecutive_failures": count,
                      "threshold": state.no_progress_threshold}
            self._stop(state, event, "tool_failures", detail | ({"refused": True} if refused else {}),
                       out)

    def _no_new_facts(self, state: RunState, event: Event, out: list[Command]) -> None:
        """Rule 2: rounds whose calls ran and brought back only results seen before."""
        if state.round_allowed == 0:
            return  # nothing ran: the already-seen streak stays as it was (rule 4)
        missing_results = state.round_results < state.round_allowed
        if state.round_new_fact or missing_results:  # a call with no result counts as new
            state.already_seen_streak = 0
            state.nudged = False
            return
        state.already_seen_streak += 1
        if state.already_seen_streak >= state.no_progress_threshold:
            self._stop(state, event, "no_new_facts", self._streaks(state), out, closing=True)
        elif state.nudge_at is not None and state.already_seen_streak >= state.nudge_at \
                and not state.nudged:
            state.nudged = True
            out.append(Nudge(command_id=_command_id(event, len(out)), run_id=event["run_id"],
                             caused_by=event["event_id"], round=state.round,
                             reason=words.nudge(state.already_seen_streak),
                             detail={"already_seen_streak": state.already_seen_streak,
                                     "nudge_at": state.nudge_at}))

    def _all_refused(self, state: RunState, event: Event, out: list[Command]) -> None:
        """Rule 4: rounds in which every proposed call was refused."""
        if state.round_allowed > 0:
            state.all_refused_streak = 0
        elif state.round_proposed > 0:
            state.all_refused_streak += 1
            if state.all_refused_streak >= state.no_progress_threshold:
                self._stop(state, event, "all_refused", self._streaks(state), out, closing=True)

    def _call_budget(self, state: RunState, event: Event, out: list[Command]) -> None:
        """Rule 7: the executed-call count reached the budget during this round."""
        if state.stop_code is None and state.call_budget is not None \
                and state.executed_calls >= state.call_budget:
            self._stop(state, event, "call_budget", {"executed_calls": state.executed_calls,
                                              "call_budget": state.call_budget}, out, closing=True)

    def _round_limit(self, state: RunState, event: Event, out: list[Command]) -> None:
        """Rule 8: the end of round `max_rounds`, as grown by exempted overloaded calls."""
        limit = state.max_rounds + state.extra_rounds
        if state.stop_code is None and state.round >= limit:
            self._stop(state, event, "round_limit", {"round": state.round, "max_rounds": limit,
                                              "extra_rounds": state.extra_rounds}, out, closing=True)

    def _time_limit(self, state: RunState, event: Event, ts: float, out: list[Command]) -> None:
        """Rule 8: the first event more than `time_limit_s` after run_started, by event time."""
        if ts - state.started_ts > state.time_limit_s:
            self._stop(state, event, "time_limit", {"elapsed_s": round(ts - state.started_ts, 3),
                                             "time_limit_s": state.time_limit_s}, out)

    def _streaks(self, state: RunState) -> dict[str, int]:
        return {"already_seen_streak": state.already_seen_streak,
                "all_refused_streak": state.all_refused_streak,
                "threshold": state.no_progress_threshold, "round": state.round}

    def _stop(self, state: RunState, event: Event, code: str, detail: dict,
              out: list[Command], closing: bool = False) -> None:
        """`closing`: a stop at the close of the open round carries that round; any other stop
        carries the round of the event that caused it (round 6's round_started says 6)."""
        state.stop_code = code
        if state.mode == "coder":  # where the workspace stood, for explain, top and metrics
            detail["workspace_version"] = state.workspace_version
        round_no = state.round if closing else event.get("round", state.round)
        out.append(Stop(command_id=_command_id(event, len(out)), run_id=event["run_id"],
                        caused_by=event["event_id"], round=round_no, code=code, action=STOPS[code].action,
                        reason=words.stop_reason(code, detail), detail=detail))


def _command_id(event: Event, index: int) -> str:
    """Derived from the causing event, so the same input always yields the same ids; `apply`
    adds the command's content to it (`content_id`)."""
    return xxh3_128_hexdigest(f"{event['run_id']}\x00{event['event_id']}\x00{index}".encode())[:24]


def _count_new_fact(state: RunState, current: bool) -> None:
    """A result that brought a new fact: its round brought one, or, for a late result, the
    already-seen streak ends all the same (late progress is progress)."""
    if current:
        state.round_new_fact = True
    else:
        state.already_seen_streak = 0
        state.nudged = False


def _verdict(out: list[Command], event: Event, decision: str, code: str | None, reason: str) -> None:
    out.append(Verdict(command_id=_command_id(event, len(out)), run_id=event["run_id"],
                       caused_by=event["event_id"], call_id=event["call_id"], round=event["round"],
                       decision=decision, code=code, reason=reason, tool=event["tool"]))


def _result_digests(event: Event, spec: dict | None, secret: bytes | None) -> list[bytes] | None:
    """The digests that identify a result's facts: the whole result's, or one per item for a
    tool that declares facts. None when the result counts as new whatever was seen before:
    empty, without content or fingerprint, or impossible to put in canonical form."""
    if "result" in event:
        try:
            if spec is None:
                found = fact_digest(event["result"], secret)
            else:
                view, items = declared_view(event["tool"], event["result"], spec["volatile"],
                                            spec["facts"], tuple(spec.get("patterns") or ()), secret)
                if items is not None:
                    return items or None  # an empty item list is an empty result
                found = fact_digest(view, secret)
        except ValueError:
            return None
        return None if found is None else [found]
    if event.get("fingerprint") is None or event["empty"]:
        return None
    given = event.get("fact_fingerprints") if spec and spec["facts"] else None
    if given is not None:
        return [_fingerprint_digest(f, secret) for f in given] or None
    return [_fingerprint_digest(event["fingerprint"], secret)]


def _tool_spec(tool: dict) -> dict:
    """What the engine keeps of a tool's declarations (`patterns` only when it declares some)."""
    spec = {"volatile": tool.get("volatile_fields") or [], "facts": tool.get("facts")}
    if tool.get("volatile_patterns") is not None:
        spec["patterns"] = tool["volatile_patterns"]
    return spec


def _coder_digests(event: Event, spec: dict | None, patterns: tuple[str, ...],
                   secret: bytes | None) -> tuple[bytes | None, list[bytes] | None, bool, bool]:
    """Coder mode: (the whole result's digest, None without content or comparison; its fact
    digests, None when it counts as new whatever was seen; whether those are a list's items;
    whether the result is empty, as contract v1's walk or the runtime's `empty` says).
    Unlike v1, an empty whole result is a fact like any other: it is held under its call's
    signature, so only the same command printing nothing again is already seen."""
    facts = spec["facts"] if spec else None
    if "result" in event:
        try:
            view, items = declared_view(event["tool"], event["result"],
                                        spec["volatile"] if spec else [], facts, patterns, secret)
            hexdigest, empty = fingerprint(view, secret)
        except ValueError:
            return None, None, False, False
        whole = bytes.fromhex(hexdigest)
        if items is not None:
            return whole, items or None, True, empty
        return whole, [whole], False, empty  # empty too: a command printing nothing again is a repeat
    if event.get("fingerprint") is None:
        return None, None, False, False
    whole = _fingerprint_digest(event["fingerprint"], secret)
    empty = bool(event.get("empty"))
    given = event.get("fact_fingerprints") if facts else None
    if given is not None:
        return whole, [_fingerprint_digest(f, secret) for f in given] or None, True, empty
    return whole, [whole], False, empty


def _fingerprint_digest(fingerprint: str, secret: bytes | None) -> bytes:
    """A runtime's fingerprint (or args digest) as 16 bytes: ours is hex already (keyed by the
    runtime); any other text is hashed."""
    if len(fingerprint) == 2 * DIGEST_SIZE:
        try:
            return bytes.fromhex(fingerprint)
        except ValueError:
            pass
    return digest(fingerprint.encode(), secret)
