"""An incident task's lifecycle: its states and the transitions between them, nothing else.

        CREATED ─── indexed: its keys read from the table Faust restored ───► RUNNING
                                                                   │   ▲
                               the group rebalanced, the partition kept │   │ indexed again
                                                                   ▼   │
                                                                 SUSPENDED
   Every state but CLOSED ──► CLOSED: the group gave the partition away, or the app stops.

The worker's `PartitionTask` lifecycle (streams/stallwatch_streams/worker/task_state.py), in the
manner of Kafka Streams' `Task.State`, without the states of a producer and a transaction: Faust
restores the table and commits the offsets, so an incident task only knows whether its view of the
table's keys is current (RUNNING) or waits to be read again (CREATED, SUSPENDED). Faust's
recovery runs between the assignment and the judge's next record, so the view is read there.
"""

from __future__ import annotations

from enum import Enum


class IncidentTaskState(Enum):
    CREATED = "created"  # assigned; its keys not read yet (Faust restores its table partition)
    RUNNING = "running"  # its keys indexed: records are judged
    SUSPENDED = "suspended"  # kept through a rebalance: its keys are read again at the next record
    CLOSED = "closed"  # given away, or the app stopped: nothing left


TRANSITIONS: dict[IncidentTaskState, frozenset[IncidentTaskState]] = {
    IncidentTaskState.CREATED: frozenset({IncidentTaskState.RUNNING, IncidentTaskState.CLOSED}),
    IncidentTaskState.RUNNING: frozenset({IncidentTaskState.SUSPENDED, IncidentTaskState.CLOSED}),
    IncidentTaskState.SUSPENDED: frozenset({IncidentTaskState.RUNNING, IncidentTaskState.CLOSED}),
    IncidentTaskState.CLOSED: frozenset(),
}


class InvalidTransition(RuntimeError):
    """A task asked to move where its lifecycle does not go: a bug, never a broker's doing."""

    def __init__(self, partition: int, current: IncidentTaskState, wanted: IncidentTaskState) -> None:
        super().__init__(f"partition {partition}: no transition from {current.name} to {wanted.name}")
        self.current, self.wanted = current, wanted


class Lifecycle:
    """One task's current state; `to` moves it along the table or raises InvalidTransition."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.state = IncidentTaskState.CREATED

    def to(self, wanted: IncidentTaskState) -> None:
        if wanted not in TRANSITIONS[self.state]:
            raise InvalidTransition(self.partition, self.state, wanted)
        self.state = wanted
