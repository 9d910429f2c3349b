"""DynamicBatching: static batching with a collection window (exercise 5.3)."""

from __future__ import annotations

from solutions.checks import is_number

from .static import StaticBatching


class DynamicBatching(StaticBatching):
    """Static batching with a collection window: a batch starts once `max_batch_size`
    requests wait, or once the oldest waiting request has waited `max_wait_ms`,
    whichever comes first. A longer window fills bigger batches (throughput) at the
    price of queueing time (latency); the source notes start from 32–64 requests and
    10–20 ms for online serving, 128+ and 100+ ms for offline jobs."""

    name = "dynamic"

    def batch_ready(self, now: float) -> bool:
        """Whether to start a batch at time `now`: True when at least `max_batch_size`
        requests wait (exactly that many is a full batch), or when someone waits and `now`
        has reached `deadline()` (the window closes AT arrival + max_wait_ms: `now ==
        deadline` is ready); False when nobody waits. Changes nothing."""
        # BEGIN SOLUTION 5.3
        # DECISION: the window's two boundaries: a batch of exactly max_batch_size is full, and the
        #   window closes AT the deadline (>=, not >); and when the engine must wake up with nothing
        #   running.
        # HINT: two reasons to start, either is enough: the batch is full, or the window of
        #   the oldest waiting request has closed (`deadline()` says when).
        # HINT: mind both boundaries: `len(waiting) == max_batch_size` is full, and
        #   `now == deadline` has closed; with nobody waiting `deadline()` is None.
        if len(self.waiting) >= self.max_batch_size:
            return True
        deadline = self.deadline()
        return deadline is not None and now >= deadline
        # END SOLUTION

    def wake_time(self) -> float | None:
        """While nothing runs and requests are collected: `deadline()`, the time at which
        the engine must step again even if nobody else arrives. None while a batch runs
        or nobody waits."""
        # BEGIN SOLUTION 5.3
        return self.deadline() if not self.running else None
        # END SOLUTION

    # ---- given ----------------------------------------------------------------------------------

    def __init__(self, max_batch_size: int = 8, max_wait_ms: float = 10.0, *, fixed_shape: bool = True,
                 max_cache_tokens: int | None = None):
        super().__init__(max_batch_size, fixed_shape=fixed_shape, max_cache_tokens=max_cache_tokens)
        if not is_number(max_wait_ms) or max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be a number >= 0, got {max_wait_ms!r}")
        self.max_wait_ms = float(max_wait_ms)

    def deadline(self) -> float | None:
        """When the oldest waiting request's window closes (None if nobody waits): the
        earliest `arrival` in `waiting` + max_wait_ms / 1000 (clock seconds)."""
        if not self.waiting:
            return None
        return min(r.arrival for r in self.waiting) + self.max_wait_ms / 1000.0
