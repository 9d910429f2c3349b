# GENERATED from solutions/batching/scheduler.py by `course stubs --write`.
# Nothing to write here: given code of stage 05 (05_batching/05_batching.ipynb).
"""Scheduler: the queues and cache accounting every batching policy shares; SchedulerOutput,
one step's plan."""

from __future__ import annotations

import abc
import bisect
from dataclasses import dataclass, field

from solutions.checks import check_int

from .request import Request
from .state import State


@dataclass
class SchedulerOutput:
    """One step's plan. `chunks`: (request, n) — run the request's next n pending tokens.
    `admitted` moved WAITING -> RUNNING this step (they need a cache row); `preempted`
    moved RUNNING -> PREEMPTED (their cache must be freed, and they go back to waiting)."""

    chunks: list[tuple[Request, int]] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.chunks)


class Scheduler(abc.ABC):
    """The queues and the cache accounting every policy shares (given code).

    `waiting` is kept sorted by `Request.order` (priority, then arrival: FCFS); `running`
    holds the requests that own a cache row, in admission order. `max_cache_tokens` is
    the cache's capacity in tokens (its memory budget); a running request is charged
    `charge(request)`, and the total, `tokens_held()`, must stay within capacity.

    What memory costs is asked of `memory`, an object with `charge(request)` and
    `held()` (both in cache tokens) that an engine hands the scheduler when its memory is
    not a contiguous row per request (stage 06's paged engine charges whole blocks).
    Without one (`memory is None`) a request is charged the policy's own reservation,
    `tokens_needed(request)`.
    """

    name = "scheduler"
    fixed_shape = False  # see StaticBatching

    def __init__(self, max_batch_size: int = 8, *, max_cache_tokens: int | None = None):
        self.max_batch_size = check_int("max_batch_size", max_batch_size, 1)
        if max_cache_tokens is not None:
            max_cache_tokens = check_int("max_cache_tokens", max_cache_tokens, 1)
        self.max_cache_tokens = max_cache_tokens  # None: the engine sets the whole cache
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.memory = None  # an engine's accounting: charge(request) and held(), in tokens

    # -- the queues
    def add(self, request: Request) -> None:
        """Queue a WAITING request in `order` (a preempted one goes back to its old place)."""
        bisect.insort(self.waiting, request, key=lambda r: r.order)

    def remove(self, request: Request) -> None:
        """Take a request out of whichever queue holds it (it finished or was aborted)."""
        for queue in (self.waiting, self.running):
            if request in queue:
                queue.remove(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def wake_time(self) -> float | None:
        """The clock time at which `schedule` would act with no new arrivals, if it is
        holding work back on purpose (dynamic batching's wait window); else None."""
        return None

    # -- the cache accounting
    def tokens_needed(self, request: Request) -> int:
        """Cache tokens charged to a running request: every token it knows. They must all
        be cached before it can sample its next one, and it grows by one per step."""
        return request.num_tokens

    def charge(self, request: Request) -> int:
        """Cache tokens admitting (or keeping) `request` costs now: `memory.charge` when an
        engine handed the scheduler its accounting, else the policy's `tokens_needed`."""
        return self.tokens_needed(request) if self.memory is None else self.memory.charge(request)

    def tokens_held(self) -> int:
        """Cache tokens the running requests hold: `memory.held()`, else their charges."""
        if self.memory is not None:
            return self.memory.held()
        return sum(self.tokens_needed(r) for r in self.running)

    def fits(self, request: Request) -> bool:
        """Room for `request`: a free row of the batch and its charge within capacity."""
        return (len(self.running) < self.max_batch_size
                and self.tokens_held() + self.charge(request) <= self.max_cache_tokens)

    def admit_fcfs(self, now: float, out: SchedulerOutput) -> None:
        """Move waiting requests to running, in queue order, while they fit. The first one
        that does not fit stops the admission: nobody overtakes the head of the queue, so
        under FCFS nobody starves."""
        while self.waiting and self.fits(self.waiting[0]):
            request = self.waiting.pop(0)
            request.transition(State.RUNNING, now)
            self.running.append(request)
            out.admitted.append(request)

    def plan_chunks(self) -> list[tuple[Request, int]]:
        """Without a token budget every running request runs all its pending tokens."""
        return [(r, r.num_pending) for r in self.running]

    @abc.abstractmethod
    def schedule(self, now: float) -> SchedulerOutput:
        """Decide the next step at time `now`: admit, preempt, and plan the chunks."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_batch_size={self.max_batch_size}, max_cache_tokens={self.max_cache_tokens})"
