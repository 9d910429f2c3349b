# GENERATED from solutions/batching/continuous.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 05_batching/05_batching.ipynb. Exercises in this file (line of each hole, then the commands):
#   5.4 Continuous batching: line 37; `course check 5.4`, `course hint 5.4`
#   5.5 Chunked prefill: a token budget: line 49; `course check 5.5`, `course hint 5.5`
#   5.6 Preemption, requeue and abort: line 65; `course check 5.6`, `course hint 5.6`
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
        raise NotImplementedError('Exercise 5.4: Continuous batching — see 05_batching.ipynb')
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
        raise NotImplementedError('Exercise 5.5: Chunked prefill: a token budget — see 05_batching.ipynb')

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
        raise NotImplementedError('Exercise 5.6: Preemption, requeue and abort — see 05_batching.ipynb')

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
