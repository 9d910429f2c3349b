"""Exercises 5.2–5.4: static, dynamic and continuous batching on the real (tiny) model,
and the clear errors every scheduler and the engine give for bad parameters."""

from __future__ import annotations

import pytest

import course
from solutions.workload import Trace, TraceRequest, make_trace

b = course.load("batching")

SMALL = dict(short_prompt=(2, 8), long_prompt=(12, 20), short_output=(1, 5), long_output=(8, 16))


def trace(n=10, seed=0, **kw) -> Trace:
    return make_trace(n, seed=seed, **(SMALL | kw))


def admitted_at(r) -> list[float]:
    return [e.time for e in r.events if e.state is b.State.RUNNING]


# ---- 5.2 static batching --------------------------------------------------------------------

@pytest.mark.exercise("5.2")
@pytest.mark.parametrize("seed", [0, 1])
def test_static_batching_matches_generating_alone(serve_trace, assert_alone, seed):
    result = serve_trace(b.StaticBatching(4), trace(seed=seed))
    assert_alone(result)
    assert all(r.finish_reason == "length" for r in result.requests)


@pytest.mark.exercise("5.2")
def test_a_static_batch_runs_until_its_slowest_request_finishes(serve_trace):
    result = serve_trace(b.StaticBatching(4), trace(12, profile="longtail", seed=3))
    batches: dict[float, list] = {}
    for r in result.requests:
        batches.setdefault(admitted_at(r)[0], []).append(r)
    starts = sorted(batches)
    assert [len(batches[t]) for t in starts] == [4, 4, 4], "all at once: three full batches of 4"
    for t, nxt in zip(starts, starts[1:]):
        last_finish = max(r.events[-1].time for r in batches[t])
        assert nxt >= last_finish, "a batch started before the previous one had finished"
    # nobody joins a running batch: the rows in use only shrink within a batch
    steps = result.steps
    for s0, s1 in zip(steps, steps[1:]):
        if s1.start not in batches:
            assert s1.rows <= s0.rows


@pytest.mark.exercise("5.2")
def test_static_batching_reserves_the_worst_case(serve_trace, assert_alone):
    tr = Trace(tuple(TraceRequest(0.0, (1, 2, 3, 4), 6) for _ in range(4)))  # 10 tokens each
    result = serve_trace(b.StaticBatching(4, max_cache_tokens=25), tr)
    assert sorted(len(v) for v in _groups(result).values()) == [2, 2], "only two requests' worst case fits in 25"
    assert all(r.preemptions == 0 for r in result.requests)
    assert_alone(result)


def _groups(result):
    out: dict[float, list] = {}
    for r in result.requests:
        out.setdefault(admitted_at(r)[0], []).append(r)
    return out


@pytest.mark.exercise("5.2")
def test_ragged_rows_join_the_same_forward(model, checked, alone):
    """A prefill of 7 tokens and another of 2 run in one step, each at its own cache row."""
    engine = checked(b.Engine(model, b.StaticBatching(3), clock=b.ManualClock()))
    reqs = [engine.add_request(b.Request(p, 4)) for p in ([5, 6, 7, 8, 9, 10, 11], [3, 4], [40])]
    out = engine.step()
    assert out.ran and {r for r, _ in out.tokens} == set(reqs)
    assert [r.num_computed for r in reqs] == [7, 2, 1]
    while engine.has_unfinished():
        engine.step()
    for r in reqs:
        assert r.output == alone(r.prompt, 4, None, ())[0]


# ---- 5.3 dynamic batching -------------------------------------------------------------------

@pytest.mark.exercise("5.3")
def test_dynamic_batching_waits_for_a_full_batch_or_the_window(model, checked):
    clock = b.ManualClock()
    engine = checked(b.Engine(model, b.DynamicBatching(4, max_wait_ms=10), clock=clock))
    for i in range(2):
        engine.add_request(b.Request([1 + i, 2], 2))
    assert not engine.step().ran, "2 of 4 waited 0 ms: keep collecting"
    assert engine.wake_time() == pytest.approx(0.010)
    clock.sleep(0.006)
    assert not engine.step().ran
    clock.sleep(0.004)
    out = engine.step()
    assert out.ran and len(engine.scheduler.running) == 2, "the window closed: run what was collected"
    assert engine.wake_time() is None, "a batch is running: nothing to wake up for"

    clock2 = b.ManualClock()
    engine2 = checked(b.Engine(model, b.DynamicBatching(4, max_wait_ms=1000), clock=clock2))
    for i in range(5):
        engine2.add_request(b.Request([1 + i, 2], 2))
    assert engine2.step().ran and len(engine2.scheduler.running) == 4, "a full batch starts at once"


@pytest.mark.exercise("5.3")
def test_the_window_counts_from_the_oldest_arrival(model, checked):
    clock = b.ManualClock()
    engine = checked(b.Engine(model, b.DynamicBatching(8, max_wait_ms=20), clock=clock))
    engine.add_request(b.Request([1, 2], 2))
    clock.sleep(0.015)
    engine.add_request(b.Request([3, 4], 2))
    clock.sleep(0.004)
    assert not engine.step().ran
    clock.sleep(0.001)
    assert engine.step().ran and len(engine.scheduler.running) == 2


@pytest.mark.exercise("5.3")
@pytest.mark.parametrize("wait_ms", [0.0, 15.0, 200.0])
def test_dynamic_batching_matches_alone_on_poisson_arrivals(serve_trace, assert_alone, wait_ms):
    result = serve_trace(b.DynamicBatching(4, max_wait_ms=wait_ms), trace(10, rate=100.0, seed=2))
    assert_alone(result)
    sizes = [len(g) for g in _groups(result).values()]
    assert max(sizes) <= 4
    if wait_ms == 200.0:
        assert sizes[:2] == [4, 4], "a long window fills the batches"


# ---- 5.4 continuous batching ----------------------------------------------------------------

@pytest.mark.exercise("5.4")
@pytest.mark.parametrize("rate", [None, 50.0])
def test_continuous_batching_matches_generating_alone(serve_trace, assert_alone, rate):
    assert_alone(serve_trace(b.ContinuousBatching(4), trace(12, rate=rate, seed=4)))


@pytest.mark.exercise("5.4")
def test_free_rows_are_refilled_at_every_step(model, checked):
    engine = checked(b.Engine(model, b.ContinuousBatching(3), clock=b.ManualClock()))
    reqs = [engine.add_request(b.Request([i + 1, 2, 3], n)) for i, n in enumerate([2, 7, 3, 1, 5, 2, 6])]
    while engine.has_unfinished():
        unfinished = sum(not r.finished for r in reqs)
        engine.step()
        assert engine.steps[-1].rows == min(3, unfinished), "a row idled while requests were waiting"


@pytest.mark.exercise("5.4")
def test_continuous_batching_takes_fewer_steps_on_a_long_tail(serve_trace, assert_alone):
    tr = trace(16, profile="longtail", seed=5)
    static = serve_trace(b.StaticBatching(4), tr)
    continuous = serve_trace(b.ContinuousBatching(4), tr)
    assert_alone(continuous)
    assert len(continuous.steps) < len(static.steps)
    busy = lambda run: sum(s.rows for s in run.steps) / len(run.steps)  # mean rows per step
    assert busy(continuous) > busy(static)


@pytest.mark.exercise("5.4")
def test_admission_is_first_come_first_served(serve_trace):
    result = serve_trace(b.ContinuousBatching(2), trace(10, rate=200.0, seed=6))
    firsts = [admitted_at(r)[0] for r in result.requests]  # requests are in arrival order
    assert firsts == sorted(firsts)
    assert all(r.finish_reason == "length" for r in result.requests), "every request finishes"


# ---- bad parameters (given code) ------------------------------------------------------------

@pytest.mark.given
@pytest.mark.parametrize("make", [
    lambda: b.StaticBatching(0), lambda: b.StaticBatching(-1), lambda: b.StaticBatching(2.5),
    lambda: b.DynamicBatching(4, max_wait_ms=-1), lambda: b.ContinuousBatching(4, max_tokens_per_step=-8),
    lambda: b.ContinuousBatching(4, max_tokens_per_step=3), lambda: b.ContinuousBatching(4, max_cache_tokens=0),
])
def test_bad_scheduler_parameters_are_clear_errors(make):
    with pytest.raises(ValueError, match=r"max_batch_size|max_wait_ms|max_tokens_per_step|max_cache_tokens"):
        make()


@pytest.mark.given
def test_bad_engine_input_is_a_clear_error(model):
    with pytest.raises(ValueError, match="exceeds"):
        b.Engine(model, b.ContinuousBatching(2, max_cache_tokens=1000))
    with pytest.raises(ValueError, match="max_len"):
        b.Engine(model, b.ContinuousBatching(2), max_len=model.config.block_size + 1)
    with pytest.raises(TypeError):
        b.Engine(model, "continuous")
    engine = b.Engine(model, b.ContinuousBatching(2, max_cache_tokens=40))
    with pytest.raises(ValueError, match="context"):
        engine.add_request(b.Request(list(range(1, 50)), 1))  # a prompt longer than the context
    with pytest.raises(ValueError, match="context"):
        engine.add_request(b.Request(list(range(1, 40)), 20))  # prompt + output longer than it
    with pytest.raises(ValueError, match="never run"):
        engine.add_request(b.Request(list(range(1, 40)), 5))   # more than the cache can ever hold
    with pytest.raises(ValueError, match="vocabulary"):
        engine.add_request(b.Request([1, 999], 2))
    engine.add_request(b.Request([1, 2], 2, request_id="x"))
    with pytest.raises(ValueError, match="already"):
        engine.add_request(b.Request([1, 2], 2, request_id="x"))
    with pytest.raises(ValueError, match="no request"):
        engine.abort("nope")
    assert len(engine.scheduler.waiting) == 1, "rejected requests must leave nothing behind"
