"""The invariant that matters most, as properties over random traces: with greedy (or
seeded) sampling every request's output is what it would be generated alone, whatever the
policy, arrival order, chunking, preemption or aborts — and, after every step, the engine's
bookkeeping holds (`conftest.check_invariants`: capacity, rows, queues)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import course
from solutions.workload import PROFILES, make_trace

b = course.load("batching")

SMALL = dict(short_prompt=(1, 8), long_prompt=(10, 20), short_output=(1, 4), long_output=(5, 12))
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

traces = st.builds(lambda n, seed, profile, rate: make_trace(n, seed=seed, profile=profile, rate=rate, **SMALL),
                   st.integers(1, 7), st.integers(0, 2**32 - 1), st.sampled_from(PROFILES),
                   st.sampled_from([None, 40.0, 400.0]))
step_times = st.sampled_from([0.0, 0.004, 0.02])
# long answers to short prompts: requests outgrow a tight cache after they were admitted
growing = st.builds(lambda n, seed: make_trace(n, seed=seed, profile="uniform", short_prompt=(1, 6),
                                               short_output=(4, 16), long_output=(4, 16)),
                    st.integers(2, 7), st.integers(0, 2**32 - 1))


@pytest.mark.exercise("5.2")
@SETTINGS
@given(tr=traces, batch=st.integers(1, 4), dt=step_times)
def test_static_batching_equals_alone(serve_trace, assert_alone, tr, batch, dt):
    assert_alone(serve_trace(b.StaticBatching(batch), tr, step_time=dt))


@pytest.mark.exercise("5.3")
@SETTINGS
@given(tr=traces, batch=st.integers(1, 4), wait=st.sampled_from([0.0, 5.0, 50.0]), dt=step_times)
def test_dynamic_batching_equals_alone(serve_trace, assert_alone, tr, batch, wait, dt):
    assert_alone(serve_trace(b.DynamicBatching(batch, max_wait_ms=wait), tr, step_time=dt))


@pytest.mark.exercise("5.4")
@SETTINGS
@given(tr=traces, batch=st.integers(1, 4), dt=step_times)
def test_continuous_batching_equals_alone(serve_trace, assert_alone, tr, batch, dt):
    assert_alone(serve_trace(b.ContinuousBatching(batch), tr, step_time=dt))


@pytest.mark.exercise("5.5")
@SETTINGS
@given(tr=traces, batch=st.integers(1, 4), extra=st.integers(0, 12), dt=step_times)
def test_chunked_prefill_equals_alone(serve_trace, assert_alone, tr, batch, extra, dt):
    result = serve_trace(b.ContinuousBatching(batch, max_tokens_per_step=batch + extra), tr, step_time=dt)
    assert_alone(result)
    assert all(s.decode_rows + s.prefill_tokens <= batch + extra for s in result.steps)


@pytest.mark.exercise("5.6")
@SETTINGS
@given(tr=growing, batch=st.integers(2, 4), slack=st.integers(0, 10), chunk=st.sampled_from([None, 0, 6]),
       seed=st.sampled_from([None, 3]), aborts=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 6)), max_size=3))
def test_preemption_and_aborts_keep_every_output(model, checked, alone, tr, batch, slack, chunk, seed, aborts):
    """A tight cache (the longest request + slack) preempts; aborts hit random requests at
    random steps. Completed requests equal alone; aborted ones hold a prefix of it."""
    sampling = None if seed is None else b.SamplingParams(temperature=1.0, top_p=0.9, seed=seed)
    budget = None if chunk is None else batch + chunk
    clock = b.ManualClock()
    sched = b.ContinuousBatching(batch, max_cache_tokens=tr.max_total_len + slack, max_tokens_per_step=budget)
    engine = checked(b.Engine(model, sched, clock=clock))
    reqs = [engine.add_request(b.Request(r.prompt, r.max_new_tokens, sampling=sampling)) for r in tr]
    todo = sorted(aborts)
    step = 0
    while engine.has_unfinished():
        while todo and todo[0][0] <= step:
            victim = reqs[todo.pop(0)[1] % len(reqs)]
            was_finished = victim.finished
            assert engine.abort(victim.request_id) is (not was_finished)
        engine.step()
        clock.sleep(0.01)
        step += 1
    event("preempted" if any(r.preemptions for r in reqs) else "no preemption")
    for r in reqs:
        expected, reason = alone(r.prompt, r.max_new_tokens, sampling, ())
        if r.finish_reason == "abort":
            assert r.output == expected[:len(r.output)]
        else:
            assert (r.output, r.finish_reason) == (expected, reason)
    assert sorted(engine.free_slots) == list(range(batch)) and int(engine.cache.lengths.sum()) == 0
