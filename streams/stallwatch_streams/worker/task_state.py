"""A partition task's lifecycle: its states and the transitions between them, nothing else.

        CREATED
           │ fenced: its producer started, which aborts the previous owner's open transaction
           ▼
   ┌──► RESTORING ────────────────────────────────┐
   │       │ restored                              │ restored while a rebalance is under way
   │       ▼                                       ▼
   │    RUNNING ──────────── revoked ──────────► SUSPENDED
   │       │   ◄──────────── assigned again ─────┘  │
   │       │ a transaction failed                    │ a transaction failed
   │       ▼                                         │
   ├── REBUILDING ◄──────────────────────────────────┘
   │       │ a rebalance is under way, or its producer was fenced (the group is asked)
   │       ▼
   └─── DROPPED

   REBUILDING ──► RESTORING: rebuilt (a new producer, its states read again).
   DROPPED ──► RESTORING: assigned again by the rebalance that follows.
   Every state but CLOSED ──► CLOSED: the group gave the partition away, or the worker stops.

Kafka Streams' `Task.State` (CREATED → RESTORING → RUNNING ⇄ SUSPENDED → CLOSED) is the model.
REBUILDING and DROPPED are a failed transaction's: Kafka Streams closes such a task and makes a
new one, where here the task keeps its expiry scan and its commit ledger across the rebuild.
"""

from __future__ import annotations

from enum import Enum


class TaskState(Enum):
    CREATED = "created"  # made on assignment; no producer yet
    RESTORING = "restoring"  # its producer started (the previous owner fenced), its states read
    RUNNING = "running"  # its batches applied as fetched and committed by its commit loop
    SUSPENDED = "suspended"  # revoked: batches in flight still commit; kept for the next assignment
    REBUILDING = "rebuilding"  # a transaction failed: what was applied since is discarded, paused
    DROPPED = "dropped"  # producer and states let go; paused until the group says whose it is
    CLOSED = "closed"  # given away, or the worker stopped: nothing left


TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.CREATED: frozenset({TaskState.RESTORING, TaskState.CLOSED}),
    TaskState.RESTORING: frozenset({TaskState.RUNNING, TaskState.SUSPENDED, TaskState.CLOSED}),
    TaskState.RUNNING: frozenset({TaskState.SUSPENDED, TaskState.REBUILDING, TaskState.CLOSED}),
    TaskState.SUSPENDED: frozenset({TaskState.RUNNING, TaskState.REBUILDING, TaskState.CLOSED}),
    TaskState.REBUILDING: frozenset({TaskState.RESTORING, TaskState.DROPPED, TaskState.CLOSED}),
    TaskState.DROPPED: frozenset({TaskState.RESTORING, TaskState.CLOSED}),
    TaskState.CLOSED: frozenset(),
}

# States whose partition takes batches: its states are the committed ones plus what it applied.
SERVING = frozenset({TaskState.RUNNING, TaskState.SUSPENDED})


class InvalidTransition(RuntimeError):
    """A task asked to move where its lifecycle does not go: a bug, never a broker's doing."""

    def __init__(self, partition: int, current: TaskState, wanted: TaskState) -> None:
        super().__init__(f"partition {partition}: no transition from {current.name} to {wanted.name}")
        self.current, self.wanted = current, wanted


class Lifecycle:
    """One task's current state; `to` moves it along the table or raises InvalidTransition."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.state = TaskState.CREATED

    def to(self, wanted: TaskState) -> None:
        if wanted not in TRANSITIONS[self.state]:
            raise InvalidTransition(self.partition, self.state, wanted)
        self.state = wanted

    def require(self, *states: TaskState) -> None:
        """For a step only some states take (a batch added to a task that does not serve)."""
        if self.state not in states:
            raise InvalidTransition(self.partition, self.state, self.state)
