"""Exercise 5.6: preemption when the cache cannot hold the next step, and abort."""

from __future__ import annotations

import pytest

import course
from solutions.workload import Trace, TraceRequest, make_trace

b = course.load("batching")
pytestmark = pytest.mark.exercise("5.6")

LONG = dict(short_prompt=(2, 8), short_output=(10, 20), long_output=(10, 20))


def tight(n=8, seed=0, rate=None):
    return make_trace(n, profile="uniform", seed=seed, rate=rate, **LONG)


@pytest.mark.parametrize("budget", [None, 5])
def test_preempted_requests_resume_with_the_same_output(serve_trace, assert_alone, budget):
    tr = tight()
    result = serve_trace(b.ContinuousBatching(4, max_cache_tokens=tr.max_total_len + 12, max_tokens_per_step=budget), tr)
    assert sum(r.preemptions for r in result.requests) > 0, "this trace must preempt"
    assert_alone(result)


def test_sampled_outputs_survive_preemption(serve_trace, assert_alone):
    tr = tight(seed=1)
    sampling = b.SamplingParams(temperature=0.9, top_k=40, seed=11)
    result = serve_trace(b.ContinuousBatching(4, max_cache_tokens=tr.max_total_len + 10), tr, sampling=sampling)
    assert sum(r.preemptions for r in result.requests) > 0
    assert_alone(result, sampling)


def test_the_latest_arrival_is_preempted_and_requeued(model, checked):
    clock = b.ManualClock()
    engine = checked(b.Engine(model, b.ContinuousBatching(3, max_cache_tokens=24), clock=clock))
    reqs = []
    for i in range(3):
        reqs.append(engine.add_request(b.Request([i + 1, 2, 3, 4], 16, request_id=f"r{i}")))
        clock.sleep(0.001)
    while True:
        before = list(engine.scheduler.running)
        out = engine.step()
        if out.preempted:
            break
        clock.sleep(0.01)
    victim = out.preempted[0]
    assert victim is max(before, key=lambda r: r.arrival), "the latest arrival goes first"
    states = [e.state for e in victim.events]
    assert states[-3:] == [b.State.RUNNING, b.State.PREEMPTED, b.State.WAITING]
    assert victim.events[-1].time == victim.events[-2].time
    assert victim in engine.scheduler.waiting and victim.slot is None and victim.num_computed == 0
    assert victim.preemptions == 1


def test_nobody_starves_under_fcfs_with_a_tight_cache(serve_trace, assert_alone):
    tr = tight(12, seed=2, rate=100.0)
    result = serve_trace(b.ContinuousBatching(3, max_cache_tokens=tr.max_total_len + 6), tr)
    assert all(r.finish_reason == "length" for r in result.requests), "every request finishes"
    firsts = [next(e.time for e in r.events if e.state is b.State.RUNNING) for r in result.requests]
    assert firsts == sorted(firsts), "first admissions follow arrival order"
    assert_alone(result)


def test_abort_in_every_state_frees_everything(model, checked, alone):
    clock = b.ManualClock()
    engine = checked(b.Engine(model, b.ContinuousBatching(2, max_tokens_per_step=4), clock=clock))
    decoding = engine.add_request(b.Request([1, 2], 10, request_id="decoding"))
    keep = engine.add_request(b.Request([3, 4, 5], 8, request_id="keep"))
    engine.step()
    engine.step()
    prefilling = engine.add_request(b.Request(list(range(1, 30)), 4, request_id="prefilling"))
    waiting = engine.add_request(b.Request([7, 8], 4, request_id="waiting"))
    assert decoding.phase == "decode" and decoding.slot is not None
    assert engine.abort("decoding")
    engine.step()                                    # "prefilling" takes the freed row, in chunks
    assert prefilling.state is b.State.RUNNING and 0 < prefilling.num_computed < 29
    assert engine.abort("prefilling")
    assert engine.abort("waiting")
    for r, n in ((decoding, 2), (prefilling, 0), (waiting, 0)):
        assert r.state is b.State.FINISHED and r.finish_reason == "abort" and r.slot is None
        assert r not in engine.scheduler.running and r not in engine.scheduler.waiting
        assert len(r.output) == n
    assert engine.abort("waiting") is False, "aborting a finished request changes nothing"
    while engine.has_unfinished():
        engine.step()
    assert keep.output == alone(keep.prompt, 8, None, ())[0], "the others are unaffected"
    assert engine.abort("keep") is False
    assert sorted(engine.free_slots) == [0, 1] and int(engine.cache.lengths.sum()) == 0
