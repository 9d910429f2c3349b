"""A request's states, the legal moves between them, and the event each move records."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class State(str, Enum):
    """Where a request is. Prefill and decode are phases of RUNNING (see `Request.phase`)."""

    WAITING = "waiting"      # queued, holds nothing
    RUNNING = "running"      # holds a cache row and cache tokens; prefilling or decoding
    PREEMPTED = "preempted"  # evicted from the cache; goes back to WAITING to be recomputed
    FINISHED = "finished"    # done: "stop", "length" or "abort"; holds nothing


#: The legal moves of the state machine and, for moves to FINISHED, the reasons allowed.
#: Only a running request can generate, so only it can finish by "stop" or "length";
#: a request can be aborted from any state that is not already final.
TRANSITIONS: dict[tuple[State, State], tuple[str, ...]] = {
    (State.WAITING, State.RUNNING): (),
    (State.RUNNING, State.PREEMPTED): (),
    (State.PREEMPTED, State.WAITING): (),
    (State.RUNNING, State.FINISHED): ("stop", "length", "abort"),
    (State.WAITING, State.FINISHED): ("abort",),
    (State.PREEMPTED, State.FINISHED): ("abort",),
}


class IllegalTransition(ValueError):
    """A request was asked to make a move its state machine does not allow."""


@dataclass(frozen=True)
class Event:
    """A request entered `state` at `time` (the engine's clock, seconds)."""

    time: float
    state: State
    reason: str | None = None
