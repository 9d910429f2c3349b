"""Stage 05, held-out cases: other batch sizes, budgets, seeds, priorities and corners.

The oracle is the visible tests' own: every request's output equals what stage 04's
`generate` produces for it alone, and `check_invariants` holds after every step.
"""

from __future__ import annotations

import math

import pytest

import course
from solutions.workload import make_trace

b = course.load("batching")
S = b.State

SMALL = dict(short_prompt=(2, 8), long_prompt=(12, 20), short_output=(1, 5), long_output=(8, 16))


def trace(n=8, seed=0, **kw):
    return make_trace(n, seed=seed, **(SMALL | kw))


def report_run(result):
    """Report a replayed run (`course.answer`): each request's tokens and finish reason, in
    trace order. The oracle (generated alone) pins both, whatever the policy."""
    course.answer("outputs", [list(r.output) for r in result.requests])
    course.answer("finish_reasons", [r.finish_reason for r in result.requests])


# ---------------------------------------------------------------------- 5.1
@pytest.mark.exercise("5.1")
def test_abort_from_waiting_and_from_preempted_and_equal_times():
    r = b.Request([1], 2, request_id="w")
    r.events.append(b.Event(0.0, S.WAITING))
    r.transition(S.FINISHED, 0.0, "abort")
    course.answer("from_waiting", [r.state.value, r.finish_reason, bool(r.finished)])
    assert r.finished and r.finish_reason == "abort"
    p = b.Request([1], 2, request_id="p")
    p.events.append(b.Event(0.0, S.WAITING))
    for to in (S.RUNNING, S.PREEMPTED):
        p.transition(to, 1.0)
    with pytest.raises(b.IllegalTransition, match="p") as err:
        p.transition(S.FINISHED, 1.0, "length")  # a preempted request generates nothing
    course.answer("error", type(err.value).__name__)
    p.transition("finished", 1.0, "abort")  # a state's value is accepted too
    course.answer("from_preempted", [p.state.value, p.finish_reason, [e.time for e in p.events],
                                     [e.state.value for e in p.events]])
    assert p.state is S.FINISHED and [e.time for e in p.events] == [0.0, 1.0, 1.0, 1.0]


@pytest.mark.exercise("5.1")
def test_append_token_one_token_budget_and_stop_first():
    r = b.Request([1, 2], 1, stop=[7])
    got = [r.append_token(7, 1.0), list(r.output), list(r.token_times)]
    course.answer("stop_first", got)
    assert got == ["stop", [], []]
    got = [r.append_token(8, 2.0), list(r.output), list(r.token_times)]
    course.answer("one_token_budget", got)
    assert got == ["length", [8], [2.0]]
    r = b.Request([1], 3, stop=(9, 10))
    got = [r.append_token(t, float(t)) for t in (1, 2)] + [r.append_token(10, 3.0), list(r.output)]
    course.answer("two_stops", got)
    assert got == [None, None, "stop", [1, 2]]


# ---------------------------------------------------------------------- 5.2
@pytest.mark.exercise("5.2")
@pytest.mark.parametrize("size, fixed", [(1, True), (3, False)])
def test_static_batches_of_other_sizes_match_alone(serve_trace, assert_alone, size, fixed):
    result = serve_trace(b.StaticBatching(size, fixed_shape=fixed), trace(7, seed=5))
    report_run(result)
    assert_alone(result)
    if size == 1:  # one at a time, in arrival order
        starts = [next(e.time for e in r.events if e.state is S.RUNNING) for r in result.requests]
        course.answer("start_order", sorted(range(len(starts)), key=starts.__getitem__))
        assert starts == sorted(starts)


@pytest.mark.exercise("5.2")
def test_nobody_joins_a_running_static_batch(model, checked):
    clock = b.ManualClock()
    engine = checked(b.Engine(model, b.StaticBatching(4), clock=clock))
    first = engine.add_request(b.Request([1, 2, 3], 6))
    engine.step()
    late = engine.add_request(b.Request([4, 5], 2))
    seen = set()
    while first.state is not S.FINISHED:
        engine.step()
        seen.add(late.state.value)
        assert late.state is S.WAITING, "a request joined a running static batch"
    course.answer("late_while_first_runs", sorted(seen))
    while engine.has_unfinished():
        engine.step()
    course.answer("outputs", [list(first.output), list(late.output)])
    course.answer("late_state", late.state.value)
    assert late.state is S.FINISHED and len(late.output) == 2


# ---------------------------------------------------------------------- 5.3
@pytest.mark.exercise("5.3")
def test_a_zero_window_starts_at_once_and_no_wake_time_when_idle():
    sched = b.DynamicBatching(8, max_wait_ms=0, max_cache_tokens=100)
    idle = [sched.wake_time(), bool(sched.batch_ready(0.0))]
    course.answer("idle", idle)
    assert idle[0] is None and not idle[1]
    sched.add(b.Request([1], 2, arrival=5.0))
    ready, wake = bool(sched.batch_ready(5.0)), sched.wake_time()
    course.answer("one_waiting", [ready, None if wake is None else float(wake)])
    assert ready and wake == pytest.approx(5.0)


@pytest.mark.exercise("5.3")
def test_dynamic_batching_with_sampling_matches_alone(serve_trace, assert_alone):
    sampling = b.SamplingParams(temperature=0.8, top_p=0.9, seed=4)
    result = serve_trace(b.DynamicBatching(3, max_wait_ms=30), trace(8, seed=6, rate=80.0), sampling=sampling)
    report_run(result)
    assert_alone(result, sampling)


# ---------------------------------------------------------------------- 5.4
@pytest.mark.exercise("5.4")
@pytest.mark.parametrize("size, seed", [(1, 7), (6, 8)])
def test_continuous_batching_other_sizes_match_alone(serve_trace, assert_alone, size, seed):
    result = serve_trace(b.ContinuousBatching(size), trace(9, seed=seed, rate=150.0))
    report_run(result)
    assert_alone(result)


@pytest.mark.exercise("5.4")
def test_continuous_admission_stops_at_the_head_of_the_queue():
    sched = b.ContinuousBatching(4, max_cache_tokens=10)
    big = b.Request(list(range(1, 9)), 2, arrival=0.0, request_id="big")
    small = b.Request([1], 2, arrival=0.1, request_id="small")
    sched.add(b.Request([1, 2, 3], 2, arrival=-1.0, request_id="first"))
    sched.add(big)
    sched.add(small)
    out = sched.schedule(0.5)
    course.answer("admitted", [r.request_id for r in out.admitted])
    course.answer("waiting", [r.request_id for r in sched.waiting])
    assert [r.request_id for r in out.admitted] == ["first"], "nobody overtakes the head of the queue"
    assert sched.waiting == [big, small]


# ---------------------------------------------------------------------- 5.5
@pytest.mark.exercise("5.5")
@pytest.mark.parametrize("size, budget", [(2, 2), (3, 7)])
def test_chunked_prefill_with_the_smallest_budgets_matches_alone(serve_trace, assert_alone, size, budget):
    result = serve_trace(b.ContinuousBatching(size, max_tokens_per_step=budget), trace(7, seed=9, rate=200.0))
    report_run(result)
    # every step's tokens: pinned by 5.5's plan (decodes first, then prefills in admission order)
    course.answer("step_tokens", [st.prefill_tokens + st.decode_rows for st in result.steps])
    assert_alone(result)
    assert all(st.prefill_tokens + st.decode_rows <= budget for st in result.steps)


@pytest.mark.exercise("5.5")
def test_a_llama_with_a_two_token_budget_matches_alone(llama, llama_alone, checked):
    """SmolLM2's architecture in miniature (RoPE, 9 query heads on 3 K/V heads): prompts in
    chunks of at most 2 tokens, each rotated at its own position."""
    clock = b.ManualClock()
    engine = checked(b.Engine(llama, b.ContinuousBatching(2, max_tokens_per_step=2), clock=clock))
    result = b.replay(engine, trace(6, seed=12, rate=300.0), sleep=clock.sleep, step_time=0.01)
    report_run(result)
    for r in result.requests:
        assert (r.output, r.finish_reason) == llama_alone(r.prompt, r.max_new_tokens), (
            f"request {r.request_id} on the Llama, its prompt fed 2 tokens a step, differs from generating it alone")


@pytest.mark.exercise("5.5")
def test_plan_chunks_spends_the_budget_in_admission_order():
    sched = b.ContinuousBatching(3, max_tokens_per_step=10, max_cache_tokens=100)
    reqs = [b.Request(list(range(1, n + 1)), 4, arrival=float(i), request_id=f"r{i}") for i, n in enumerate((6, 9, 2))]
    for r in reqs:
        sched.add(r)
    out = sched.schedule(5.0)
    first = [(r.request_id, n) for r, n in out.chunks]
    course.answer("first_plan", [[i, int(n)] for i, n in first])
    assert first == [("r0", 6), ("r1", 4)]
    reqs[0].num_computed, reqs[1].num_computed = 6, 4
    reqs[0].output.append(5)  # r0 decodes now
    second = [(r.request_id, n) for r, n in sched.plan_chunks()]
    course.answer("second_plan", [[i, int(n)] for i, n in second])
    assert second == [("r0", 1), ("r1", 5), ("r2", 2)]


# ---------------------------------------------------------------------- 5.6
@pytest.mark.exercise("5.6")
def test_the_victim_is_the_lowest_priority_not_the_latest():
    sched = b.ContinuousBatching(3, max_cache_tokens=12)
    urgent_late = b.Request([1] * 4, 8, priority=0, arrival=2.0, request_id="urgent")
    relaxed_early = b.Request([1] * 4, 8, priority=5, arrival=0.0, request_id="relaxed")
    normal = b.Request([1] * 4, 8, priority=1, arrival=1.0, request_id="normal")
    for r in (urgent_late, relaxed_early, normal):
        sched.add(r)
    admitted = len(sched.schedule(3.0).admitted)
    course.answer("admitted", admitted)
    assert admitted == 3
    for r in sched.running:
        r.output.append(1)  # 15 tokens > 12
    out = sched.schedule(4.0)
    course.answer("preempted", [r.request_id for r in out.preempted])
    course.answer("after", [relaxed_early.state.value, sorted(r.request_id for r in sched.running)])
    assert [r.request_id for r in out.preempted] == ["relaxed"]
    assert relaxed_early.state is S.PREEMPTED and relaxed_early not in sched.running


@pytest.mark.exercise("5.6")
def test_preempting_several_at_once_and_aborting_a_running_request(model, checked, alone):
    sched = b.ContinuousBatching(4, max_cache_tokens=14)
    for i in range(4):
        r = b.Request([1, 2, 3], 6, arrival=float(i), request_id=f"r{i}")
        sched.add(r)
    sched.schedule(5.0)
    for r in sched.running:
        r.output.extend([1, 1])  # 4 x 5 = 20 > 14: two must go
    out = sched.schedule(6.0)
    course.answer("preempted", [r.request_id for r in out.preempted])
    course.answer("tokens_held", int(sched.tokens_held()))
    assert [r.request_id for r in out.preempted] == ["r3", "r2"] and sched.tokens_held() == 10
    clock = b.ManualClock()
    engine = checked(b.Engine(model, b.ContinuousBatching(2), clock=clock))
    keep = engine.add_request(b.Request([5, 6], 5, request_id="keep"))
    gone = engine.add_request(b.Request([7, 8, 9], 5, request_id="gone"))
    engine.step()
    aborted = engine.abort("gone")
    course.answer("abort", [bool(aborted), gone.finish_reason, gone.slot])
    assert aborted and gone.finish_reason == "abort" and gone.slot is None
    while engine.has_unfinished():
        engine.step()
    course.answer("keep_output", list(keep.output))
    assert keep.output == alone(keep.prompt, 5, None, ())[0]


@pytest.mark.exercise("5.6")
def test_a_cache_exactly_full_after_preemption_keeps_the_rest():
    """4 + 4 + 4 + 3 = 15 tokens in a 12-token cache: evicting the last one leaves exactly 12."""
    sched = b.ContinuousBatching(4, max_cache_tokens=12)
    reqs = [b.Request([1] * n, 8, arrival=float(i), request_id=f"q{i}") for i, n in enumerate((3, 3, 3, 2))]
    for r in reqs:
        sched.add(r)
    sched.admit_fcfs(0.5, b.SchedulerOutput())
    for r in sched.running:
        r.output.append(1)
    out = b.SchedulerOutput()
    sched.preempt(1.0, out)
    course.answer("preempted", [r.request_id for r in out.preempted])
    course.answer("held", int(sched.tokens_held()))
    assert [r.request_id for r in out.preempted] == ["q3"] and sched.tokens_held() == 12


# ---------------------------------------------------------------------- 5.7
@pytest.mark.exercise("5.7")
def test_metrics_of_a_one_token_request_and_an_unadmitted_one():
    r = b.Request([1, 2, 3], 1, request_id="one")
    r.arrival = 2.0
    r.events.append(b.Event(2.0, S.WAITING))
    r.transition(S.RUNNING, 2.5)
    r.append_token(4, 3.0)
    r.transition(S.FINISHED, 3.0, "length")
    m = b.request_metrics(r)
    course.answer("one_token", {"ttft": m.ttft, "queue": m.queue, "e2e": m.e2e, "tpot": m.tpot,
                                "itl": list(m.itl), "output_tokens": m.output_tokens})
    assert m.ttft == pytest.approx(1.0) and m.queue == pytest.approx(0.5) and m.e2e == pytest.approx(1.0)
    assert m.tpot is None and m.itl == ()
    w = b.Request([1], 2, request_id="never")
    w.arrival = 0.0
    w.events.append(b.Event(0.0, S.WAITING))
    m = b.request_metrics(w)
    course.answer("never_admitted", {"queue": m.queue, "ttft": m.ttft, "e2e": m.e2e, "tpot": m.tpot,
                                     "itl": list(m.itl), "output_tokens": m.output_tokens})
    assert m.queue is None and m.ttft is None and m.e2e is None and m.output_tokens == 0


@pytest.mark.exercise("5.7")
def test_percentile_corners():
    got = [float(b.percentile([None, None], 50)), float(b.percentile([3.0], 99)),
           float(b.percentile([1.0, None, 3.0, 2.0], 50)), float(b.percentile([0.0, 10.0], 25))]
    course.answer("percentiles", got)  # NaN compares equal to NaN
    assert math.isnan(got[0])
    assert got[1] == 3.0
    assert got[2] == pytest.approx(2.0)
    assert got[3] == pytest.approx(2.5)
    with pytest.raises(ValueError) as err:
        b.percentile([1.0], -0.5)
    course.answer("error", type(err.value).__name__)


@pytest.mark.exercise("5.7")
def test_summary_of_a_static_run_counts_dead_rows_out_of_occupancy(serve_trace):
    result = serve_trace(b.StaticBatching(4), trace(6, seed=11), step_time=0.02)
    s = b.summarize(result)
    course.answer("summary", {k: s[k] for k in ("requests", "aborted", "output_tokens", "occupancy")})
    course.answer("outputs", [list(r.output) for r in result.requests])
    assert s["requests"] == 6 and s["output_tokens"] == sum(len(r.output) for r in result.requests)
    assert s["occupancy"] == pytest.approx(sum(st.rows for st in result.steps) / len(result.steps) / 4)
    assert s["occupancy"] < 1.0, "finished rows of a static batch are not occupancy"
