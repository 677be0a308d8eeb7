"""The policy is declared once (`stallwatch.contract.policy.Policy`); its defaults per mode and
the run state's policy are derived from it."""

from __future__ import annotations

import dataclasses

from stallwatch.contract.events import Policy
from stallwatch.contract.policy import MODES, POLICY_FIELDS, V1_DEFAULTS, policy_defaults
from stallwatch.engine.state import RunPolicy, RunState


def test_the_models_defaults_are_contract_v1s_column_of_the_table():
    assert Policy().model_dump() == V1_DEFAULTS == policy_defaults("researcher")
    assert V1_DEFAULTS["no_progress_threshold"] == 5 and V1_DEFAULTS["max_rounds"] == 40


def test_the_run_state_holds_the_same_fields_and_defaults():
    assert RunState(mode="researcher", started_ts=0.0).policy._asdict() == V1_DEFAULTS
    assert RunPolicy._fields == tuple(Policy.model_fields) == POLICY_FIELDS
    assert not {f.name for f in dataclasses.fields(RunState)} & set(POLICY_FIELDS)


def test_a_mode_takes_its_own_defaults_for_the_fields_it_does_not_set():
    for mode in MODES:
        assert Policy.for_mode(mode).model_dump() == policy_defaults(mode)
    mine = Policy.for_mode("coder", {"max_rounds": 7})
    assert mine.max_rounds == 7 and mine.stall_nudge_at == policy_defaults("coder")["stall_nudge_at"]
    assert policy_defaults("nonsense") == V1_DEFAULTS
