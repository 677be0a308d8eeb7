"""A partition task's lifecycle, without a broker: every transition the docstring draws is taken,
every other one raises and leaves the state as it was."""

from __future__ import annotations

import itertools

import pytest

from stallwatch_streams.worker.task_state import TRANSITIONS, InvalidTransition, Lifecycle, TaskState

S = TaskState
# The edges drawn in stallwatch_streams/worker/task_state.py's docstring, written out again here so
# that a change of the table is a change of this test too.
DRAWN = {
    (S.CREATED, S.RESTORING),
    (S.RESTORING, S.RUNNING),
    (S.RESTORING, S.SUSPENDED),
    (S.RUNNING, S.SUSPENDED),
    (S.SUSPENDED, S.RUNNING),
    (S.RUNNING, S.REBUILDING),
    (S.SUSPENDED, S.REBUILDING),
    (S.REBUILDING, S.RESTORING),
    (S.REBUILDING, S.DROPPED),
    (S.DROPPED, S.RESTORING),
    *((state, S.CLOSED) for state in S if state is not S.CLOSED),
}


def at(state: TaskState) -> Lifecycle:
    lifecycle = Lifecycle(partition=3)
    lifecycle.state = state
    return lifecycle


def test_the_table_is_the_drawn_lifecycle():
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == DRAWN
    assert set(TRANSITIONS) == set(S)


@pytest.mark.parametrize(("current", "wanted"), sorted(DRAWN, key=lambda e: (e[0].value, e[1].value)))
def test_a_drawn_transition_is_taken(current: TaskState, wanted: TaskState):
    lifecycle = at(current)
    lifecycle.to(wanted)
    assert lifecycle.state is wanted


@pytest.mark.parametrize(
    ("current", "wanted"), [edge for edge in itertools.product(S, S) if edge not in DRAWN]
)
def test_any_other_transition_raises_and_leaves_the_state(current: TaskState, wanted: TaskState):
    lifecycle = at(current)
    with pytest.raises(InvalidTransition, match=f"partition 3: no transition from {current.name}"):
        lifecycle.to(wanted)
    assert lifecycle.state is current


def test_a_task_starts_created_and_every_state_leads_to_closed():
    assert Lifecycle(0).state is S.CREATED
    reachable, frontier = {S.CREATED}, [S.CREATED]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()] - reachable:
            reachable.add(nxt)
            frontier.append(nxt)
    assert reachable == set(S)
    assert all(S.CLOSED in TRANSITIONS[state] for state in S if state is not S.CLOSED)


def test_a_step_for_serving_states_only_raises_elsewhere():
    at(S.SUSPENDED).require(S.RUNNING, S.SUSPENDED)
    with pytest.raises(InvalidTransition):
        at(S.DROPPED).require(S.RUNNING, S.SUSPENDED)
