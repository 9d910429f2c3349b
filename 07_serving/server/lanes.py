# GENERATED from solutions/server/lanes.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.8 Priority lanes: short requests first, none starved: lines 31, 42; `course check 7.8`, `course hint 7.8`
"""7.8 Priority lanes: short requests ahead of long ones, and no request waits forever.

The source's service layer keeps two queues: a fast lane for short interactive requests
and a batch lane for long or offline work. `LaneBatching` (`--scheduling-policy priority`,
vLLM's name) is the fair scheduler (fairness.py) with every choice between requests made
by `lane_rank`: admission takes the least, preemption takes the greatest, and the step's
prefill budget goes to the interactive lane's (`lane` 0) prefills first.
"""

from __future__ import annotations

from collections import Counter

from solutions.batching import Request, SchedulerOutput

from .fairness import FairBatching

SHORT_TOKENS = 256  # a request whose worst case (prompt + max_new_tokens) fits this is interactive
MAX_WAIT_S = 5.0    # a request waiting this long since its arrival is interactive too (aging)


def lane(request: Request, now: float, short_tokens: int = SHORT_TOKENS, max_wait_s: float = MAX_WAIT_S) -> int:
    """A request's lane at time `now`: 0, interactive, when its worst case, `len(prompt) +
    max_new_tokens` tokens, is at most `short_tokens`, or when at least `max_wait_s` seconds
    have passed since its `arrival` (aging: a long request behind a stream of short ones
    still starts, within that bound; a request not added to an engine yet, `arrival` None,
    has not waited). Otherwise 1, batch work."""
    raise NotImplementedError('Exercise 7.8: Priority lanes: short requests first, none starved — see 07_serving.ipynb')


def lane_rank(request: Request, usage: Counter[str], now: float, short_tokens: int = SHORT_TOKENS,
              max_wait_s: float = MAX_WAIT_S) -> tuple:
    """A sort key, least first: the scheduler admits the waiting request of least key and
    preempts the running request of greatest key, so one key must make both right. Every
    interactive request (`lane` 0) comes before every batch request, whatever their
    priorities; within a lane, the fair scheduler's order (`FairBatching.rank`: priority,
    lower first, then the client's `usage`, then `request.order`). One client at one
    priority: first come, first served within each lane."""
    raise NotImplementedError('Exercise 7.8: Priority lanes: short requests first, none starved — see 07_serving.ipynb')


class LaneBatching(FairBatching):
    """The fair scheduler (fairness.py) in two lanes: every choice it makes between requests
    is made by `lane_rank` at the time of the step (`now`). A quiet client's short request
    starts ahead of the flood's long ones, and a long request waits at most about
    `max_wait_s` seconds behind short ones before it is served as one of them."""

    name = "continuous+lanes"

    def __init__(self, max_batch_size: int = 8, *, short_tokens: int = SHORT_TOKENS, max_wait_s: float = MAX_WAIT_S,
                 **kw) -> None:
        super().__init__(max_batch_size, **kw)
        if not (isinstance(short_tokens, int) and short_tokens >= 1):
            raise ValueError(f"short_tokens must be an int >= 1, got {short_tokens!r}")
        if not (isinstance(max_wait_s, (int, float)) and max_wait_s >= 0):
            raise ValueError(f"max_wait_s must be a number of seconds >= 0, got {max_wait_s!r}")
        self.short_tokens, self.max_wait_s, self.now = short_tokens, float(max_wait_s), 0.0

    def rank(self, request: Request, usage: Counter[str]) -> tuple:  # type: ignore[override]
        return lane_rank(request, usage, self.now, self.short_tokens, self.max_wait_s)

    def schedule(self, now: float) -> SchedulerOutput:
        self.now = now  # the lanes of this step: who has waited long enough by now
        return super().schedule(now)

    def prefill_key(self, request: Request, nth: int, usage: Counter[str], index: int) -> tuple:  # type: ignore[override]
        """The interactive lane's prefills first, then the fair scheduler's rounds."""
        return (lane(request, self.now, self.short_tokens, self.max_wait_s),
                *FairBatching.prefill_key(request, nth, usage, index))
