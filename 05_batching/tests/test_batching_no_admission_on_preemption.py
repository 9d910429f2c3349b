"""Exercises 5.4 and 5.6: a step that preempts admits nobody.

When the running requests outgrow the cache, the scheduler preempts the latest arrival, and
in that same step admits no waiting request, even one that would fit the memory just freed
(see `ContinuousBatching.schedule`): the victim's memory must not go straight to a newcomer.
The rule is written in 5.4's `schedule`: 5.4's own test judges it with a stand-in for 5.6's
`preempt` (so 5.4 can be finished before 5.6 is written); the others run the learner's whole
scheduler and count for 5.6, which requires 5.4.
"""

from __future__ import annotations

import pytest

import course
from solutions.workload import make_trace

b = course.load("batching")


def _grow(request, n):
    """Pretend `request` sampled n more tokens (the scheduler only counts them)."""
    request.output.extend([1] * n)


def _stand_in_preempt(sched):
    """5.6's rule, written here, so that 5.4's `schedule` is judged without the learner's 5.6."""
    def preempt(now, out):
        while sched.running and sched.tokens_held() > sched.max_cache_tokens:
            victim = max(sched.running, key=lambda r: r.order)
            sched.running.remove(victim)
            victim.transition(b.State.PREEMPTED, now)
            out.preempted.append(victim)
    return preempt


@pytest.mark.exercise("5.4")
def test_schedule_preempts_or_admits_never_both():
    """5.4's decision alone (5.6's `preempt` stood in for): a step whose running requests
    outgrew the cache preempts and admits nobody; a step whose running requests fit admits."""
    sched = b.ContinuousBatching(4, max_cache_tokens=10)
    sched.preempt = _stand_in_preempt(sched)
    first = b.Request([1, 2, 3, 4], 8, request_id="first", arrival=0.0)
    second = b.Request([5, 6, 7, 8], 8, request_id="second", arrival=0.1)
    for r in (first, second):
        sched.add(r)
    out = sched.schedule(0.2)
    assert out.admitted == [first, second] and not out.preempted, (
        f"8 of 10 cache tokens fit: both are admitted and nobody is preempted, got admitted "
        f"{[r.request_id for r in out.admitted]}, preempted {[r.request_id for r in out.preempted]}")
    newcomer = b.Request([9], 8, request_id="newcomer", arrival=0.3)
    sched.add(newcomer)
    _grow(first, 2)
    _grow(second, 1)  # 6 + 5 = 11 tokens > 10
    out = sched.schedule(0.4)
    assert [r.request_id for r in out.preempted] == ["second"], (
        f"the running requests hold 11 > 10 cache tokens: schedule preempts (as `preempt` does), got "
        f"preempted {[r.request_id for r in out.preempted]}")
    assert out.admitted == [] and newcomer in sched.waiting and newcomer.state is b.State.WAITING, (
        f"this step preempted and also admitted {[r.request_id for r in out.admitted]}: a step that preempts "
        f"admits nobody, not even a request that fits the memory just freed (the newcomer would overtake "
        f"the victim and the cache would fill again at once)")
    assert [r for r, _ in out.chunks] == [first], "the chunks are planned for the requests still running"
    out = sched.schedule(0.5)  # 6 tokens held now: room again (the engine would requeue the victim)
    assert [r.request_id for r in out.admitted] == ["newcomer"] and not out.preempted, (
        f"the next step's running requests fit (6 of 10): it admits again, got admitted "
        f"{[r.request_id for r in out.admitted]}, preempted {[r.request_id for r in out.preempted]}")


@pytest.mark.exercise("5.6")
def test_the_step_that_preempts_admits_nobody():
    sched = b.ContinuousBatching(4, max_cache_tokens=10)
    first = b.Request([1, 2, 3, 4], 8, request_id="first", arrival=0.0)
    second = b.Request([5, 6, 7, 8], 8, request_id="second", arrival=0.1)
    for r in (first, second):
        sched.add(r)
    out = sched.schedule(0.2)
    assert out.admitted == [first, second] and not out.preempted
    newcomer = b.Request([9], 8, request_id="newcomer", arrival=0.3)
    sched.add(newcomer)
    _grow(first, 2)
    _grow(second, 1)  # 6 + 5 = 11 tokens > 10: someone must go
    out = sched.schedule(0.4)
    assert out.preempted == [second], "the latest arrival is the victim"
    assert out.admitted == [], (
        f"this step preempted {[r.request_id for r in out.preempted]} and also admitted "
        f"{[r.request_id for r in out.admitted]}: a step that preempts admits nobody (the victim's "
        f"memory must not go straight to a newcomer)")
    assert newcomer.state is b.State.WAITING and newcomer in sched.waiting
    assert sched.running == [first]
    assert [r for r, _ in out.chunks] == [first]


@pytest.mark.exercise("5.6")
@pytest.mark.parametrize("seed, budget", [(0, None), (3, 6)])
def test_no_request_is_admitted_while_another_is_preempted(serve_trace, assert_alone, seed, budget):
    """Over whole runs with a tight cache: no admission ever shares a step with a preemption."""
    trace = make_trace(10, profile="uniform", seed=seed, rate=200.0, short_prompt=(2, 8),
                       short_output=(10, 20), long_output=(10, 20))
    sched = b.ContinuousBatching(4, max_cache_tokens=trace.max_total_len + 10, max_tokens_per_step=budget)
    result = serve_trace(sched, trace)
    preempted_at = {e.time for r in result.requests for e in r.events if e.state is b.State.PREEMPTED}
    admitted_at = {e.time for r in result.requests for e in r.events if e.state is b.State.RUNNING}
    assert preempted_at, "this trace must preempt"
    both = sorted(preempted_at & admitted_at)
    assert not both, f"at t={both[:5]} a step preempted and admitted: a step that preempts admits nobody"
    assert_alone(result)
