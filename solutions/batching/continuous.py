"""ContinuousBatching: iteration-level scheduling, chunked prefill, preemption (5.4–5.6)."""

from __future__ import annotations

from solutions.checks import check_int

from .request import Request
from .scheduler import Scheduler, SchedulerOutput
from .state import State


class ContinuousBatching(Scheduler):
    """Iteration-level batching: before every step, waiting requests join while a row and
    cache capacity are free. A request is charged only the tokens it has
    (`Scheduler.tokens_needed`), not its worst case; when the running ones outgrow the
    cache, the last in queue order is PREEMPTED (5.6). `max_tokens_per_step` (5.5): the
    step's token budget, decodes first (>= max_batch_size, so every decode always fits).
    """

    name = "continuous"

    def schedule(self, now: float) -> SchedulerOutput:
        """The next step's plan at time `now`, a new SchedulerOutput. A step preempts or
        admits, never both. A step that begins with the running requests holding more than
        `max_cache_tokens` (`tokens_held()`) preempts, by `preempt`'s rule, and admits NOBODY,
        not even a request that would fit the memory just freed (see `preempt`). Any other
        step admits FCFS, the head of the waiting queue for as long as it fits. `out.chunks`
        is the step's plan under the token budget (`plan_chunks`'s rule) over the requests
        running once the step's admissions are made: a request runs in the step that admits
        it."""
        out = SchedulerOutput()
        # BEGIN SOLUTION 5.4
        # DECISION: the step's order: whether the running requests still fit is decided before
        #   anyone is admitted, a step that preempts admits nobody, and the chunks are planned for
        #   the requests running after admission (a newcomer runs in the step that admits it).
        # HINT: the same shape as StaticBatching.schedule, without waiting for an empty batch:
        #   admission happens before every step.
        # HINT: first ask whether the running requests still fit (`tokens_held()` against the
        #   capacity); a step either preempts or admits, never both; plan the chunks last.
        if self.tokens_held() > self.max_cache_tokens:
            self.preempt(now, out)
        else:
            self.admit_fcfs(now, out)
        out.chunks = self.plan_chunks()
        # END SOLUTION
        return out

    def plan_chunks(self) -> list[tuple[Request, int]]:
        """This step's (request, n) list under the budget `max_tokens_per_step`: every
        decoding request (`phase == "decode"`) gets its one token before any prefilling one
        gets a token, in `running` order; the prefilling ones, in `running` (admission) order,
        each get as much of their `num_pending` as the budget still allows. Requests that get
        0 tokens are left out. The sum of n never exceeds the budget. Without a budget (None):
        `Scheduler.plan_chunks`. Changes nothing."""
        if self.max_tokens_per_step is None:
            return super().plan_chunks()
        # BEGIN SOLUTION 5.5
        # DECISION: the budget's order: decodes before prefills (each decode needs one token, and
        #   skipping it stalls a stream), prefills in admission order, the last one cut to what is
        #   left, zero-token entries dropped.
        # HINT: decodes first: a decode needs only one token, and skipping it stalls a stream.
        # HINT: walk the decoders, then the prefillers, taking min(pending, budget left) for
        #   each and subtracting it from what is left; skip the zeros.
        left = self.max_tokens_per_step
        decoding = [r for r in self.running if r.phase == "decode"]
        prefilling = [r for r in self.running if r.phase == "prefill"]
        chunks = []
        for r in decoding + prefilling:
            n = min(r.num_pending, left)
            if n:
                chunks.append((r, n))
                left -= n
        return chunks
        # END SOLUTION

    def preempt(self, now: float, out: SchedulerOutput) -> None:
        """Preempt as few running requests as it takes: afterwards `tokens_held() <=
        max_cache_tokens`, or nothing runs. Victims are chosen one at a time, each the
        running request LAST in queue order at that moment (max `order`: lowest priority,
        then latest arrival); a victim is no longer in `running`, is PREEMPTED at `now`, and
        is in `out.preempted`, in the order chosen (the engine frees its cache, moves it to
        WAITING and queues it again). Admits nobody.

        Why nobody is admitted in that step (`schedule`): the running requests outgrew the
        cache (each grows by a token per step). Handing the victim's memory straight to a
        newcomer fills the cache again at once, so the next step preempts again (thrashing),
        and the newcomer overtakes the victim, which arrived first. vLLM's scheduler keeps
        the same rule: running before swapped before waiting, with no new prefill in a step
        that preempted (vllm-project/vllm PR #5633, "don't schedule prefill if freeing kv cache")."""
        # BEGIN SOLUTION 5.6
        # DECISION: the victim and the stopping rule: evict one at a time, always the running
        #   request last in queue order at that moment, and stop as soon as the rest fit (strict >:
        #   at exactly the capacity nobody more leaves); requeue and abort in an order that leaves
        #   no row or queue entry behind.
        # HINT: a loop: while the running requests hold more than the capacity, evict one.
        # HINT: `tokens_held()` changes as soon as the victim leaves `running`; the victim is
        #   `max(self.running, key=...)` of `Request.order`.
        while self.running and self.tokens_held() > self.max_cache_tokens:
            victim = max(self.running, key=lambda r: r.order)
            self.running.remove(victim)
            victim.transition(State.PREEMPTED, now)
            out.preempted.append(victim)
        # END SOLUTION

    # ---- given ----------------------------------------------------------------------------------

    def __init__(self, max_batch_size: int = 8, *, max_tokens_per_step: int | None = None,
                 max_cache_tokens: int | None = None):
        super().__init__(max_batch_size, max_cache_tokens=max_cache_tokens)
        if max_tokens_per_step is not None:
            max_tokens_per_step = check_int("max_tokens_per_step", max_tokens_per_step, 1)
            if max_tokens_per_step < self.max_batch_size:
                raise ValueError(f"max_tokens_per_step ({max_tokens_per_step}) must be >= max_batch_size "
                                 f"({self.max_batch_size}): every running decode needs a token each step")
        self.max_tokens_per_step = max_tokens_per_step
        if max_tokens_per_step is not None:
            self.name = "continuous+chunked"
