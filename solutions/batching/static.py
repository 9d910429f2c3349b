"""StaticBatching: request-level batching, the baseline (exercise 5.2)."""

from __future__ import annotations

from .request import Request
from .scheduler import Scheduler, SchedulerOutput


class StaticBatching(Scheduler):
    """Request-level batching: a batch is formed only when nothing runs, and runs until its
    slowest request finishes; nobody joins a running batch.

    It reserves the worst case up front — `tokens_needed` is prompt + max_new_tokens — so
    a batch it starts can always finish without running out of cache (and never preempts).

    `fixed_shape` (default True): the batch is one fixed-shape tensor, as in stage 04's
    `generate`: a finished request's row keeps being computed, for nobody, until the whole
    batch ends (the engine's dead rows). With False, finished rows drop out of the forward
    (the row still idles: nobody may take it), which a CPU rewards.
    """

    name = "static"

    def schedule(self, now: float) -> SchedulerOutput:
        """The next step's plan at time `now`, a new SchedulerOutput.

        A batch's membership is fixed from the step that starts it until its last member
        finishes: nobody is admitted while anyone runs. A new batch may start only in a step
        where nothing runs and `batch_ready(now)` holds; it takes the head of the waiting
        queue, in queue order, for as long as each request fits beside those taken before it
        (FCFS: nobody overtakes one that does not fit), each RUNNING at `now` and listed in
        `out.admitted`. Never preempts. `out.chunks`: every request running once the step's
        admissions are made, with all its pending tokens (a new batch runs in the step that
        starts it; empty when nothing runs).
        """
        out = SchedulerOutput()
        # BEGIN SOLUTION 5.2
        # HINT: two steps: maybe start a batch (only when none is running), then plan the
        #   chunks of whoever runs; the base class has a method for each (`admit_fcfs`,
        #   `plan_chunks`).
        if not self.running and self.batch_ready(now):
            self.admit_fcfs(now, out)
        out.chunks = self.plan_chunks()
        # END SOLUTION
        return out

    # ---- given ----------------------------------------------------------------------------------

    def __init__(self, max_batch_size: int = 8, *, fixed_shape: bool = True, max_cache_tokens: int | None = None):
        super().__init__(max_batch_size, max_cache_tokens=max_cache_tokens)
        if not isinstance(fixed_shape, bool):
            raise TypeError(f"fixed_shape must be a bool, got {fixed_shape!r}")
        self.fixed_shape = fixed_shape

    def tokens_needed(self, request: Request) -> int:
        """The worst case: prompt + max_new_tokens, reserved at admission."""
        return len(request.prompt) + request.max_new_tokens

    def batch_ready(self, now: float) -> bool:
        """Whether to start a batch now (nothing running): whenever anyone waits."""
        return bool(self.waiting)
