"""The contracts of stage 05, one rule at a time, each broken the way a learner breaks it.

Most tests of the stage replay whole traces and compare every answer with generating it
alone; a bug that does not change an answer (a row read at the wrong position only shows
with chunks, a decode padded to a prompt, a metric averaged over the wrong things) slips
past them. The tests here pin those rules down on small, hand-made cases.
"""

from __future__ import annotations

import pytest
import torch

import course
from solutions import kv_cache
from solutions.kv_cache import KVCache

b = course.load("batching")
S = b.State


# ---- 5.2 the ragged forward -------------------------------------------------------------------

def _with_rows(model, prompts, computed):
    """Requests whose cache rows 0.. already hold `computed[i]` tokens of their prompt."""
    cache = KVCache.for_model(model, len(prompts), max_len=model.config.block_size)
    reqs = []
    for slot, (p, c) in enumerate(zip(prompts, computed)):
        r = b.Request(p, 4, request_id=f"r{slot}")
        r.slot = slot
        if c:
            b.forward_chunks(model, cache, [(r, c)])
        reqs.append(r)
    return cache, reqs


def _next_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens]))[0, -1]


@pytest.mark.exercise("5.2")
def test_forward_chunks_runs_the_next_pending_tokens_and_reports_only_ready_rows(model):
    """A chunk is `tokens[num_computed : num_computed + n]`; a request is ready (its logits
    returned) only once nothing is pending; the logits are those of the whole sequence."""
    prompts = ([5, 6, 7, 8, 9, 10, 11], [3, 4], [20, 21, 22, 23, 24], [12, 13, 14, 15, 16])
    cache, (mid, short, dec, four) = _with_rows(model, prompts, [3, 0, 5, 1])
    dec.output.append(30)                        # dec decodes: its sampled token is pending
    with torch.no_grad():
        ready, logits = b.forward_chunks(model, cache, [(mid, 2), (short, 2), (dec, 1), (four, 4)])
    assert [mid.num_computed, short.num_computed, dec.num_computed, four.num_computed] == [5, 2, 6, 5], (
        "each request's num_computed must grow by its chunk's n")
    assert [int(n) for n in cache.lengths] == [5, 2, 6, 5], "the chunks' K/V are appended to the requests' rows"
    assert mid not in ready, "a request mid-prefill (tokens still pending) is not ready: it samples nothing yet"
    assert set(ready) == {short, dec, four} and logits.shape == (3, model.config.vocab_size)
    for r, row in zip(ready, logits):
        torch.testing.assert_close(row, _next_logits(model, r.tokens), rtol=0, atol=1e-9,
                                   msg=f"{r.request_id}: logits row i must predict ready[i]'s next token "
                                       "(read at its last real position, not the padding)")
    with torch.no_grad():                        # the rest of mid's prompt: now it is ready
        ready, logits = b.forward_chunks(model, cache, [(mid, 2)])
    assert ready == [mid]
    torch.testing.assert_close(logits[0], _next_logits(model, mid.tokens), rtol=0, atol=1e-9,
                               msg="a prompt run in chunks must end with the logits of one prefill")


@pytest.mark.exercise("5.2")
def test_a_decode_is_never_padded_to_a_prompt_chunk(model, monkeypatch):
    """The contract of `forward_chunks`: a forward's rows are right-padded to its longest
    chunk, and a decode (n == 1) is not padded to a long prompt chunk."""
    calls = []
    inner = b.model_runner.forward_cached

    def spy(model_, idx, cache, **kw):
        n_new = [int(n) for n in (kw.get("n_new") if kw.get("n_new") is not None else [idx.shape[1]] * len(idx))]
        calls.append((tuple(idx.shape), n_new))
        return inner(model_, idx, cache, **kw)

    monkeypatch.setattr(b.model_runner, "forward_cached", spy)
    monkeypatch.setattr(kv_cache, "forward_cached", spy)
    cache, (a, c, d) = _with_rows(model, ([1, 2, 3], list(range(4, 24)), [7, 8]), [3, 0, 2])
    a.output.append(9)
    d.output.append(9)
    calls.clear()
    with torch.no_grad():
        b.forward_chunks(model, cache, [(a, 1), (c, 20), (d, 1)])
    assert calls, "forward_chunks must run the model through stage 04's forward_cached"
    for shape, n_new in calls:
        assert shape[1] == max(n_new), f"a forward of width {shape[1]} for chunks {n_new}: pad only to the longest"
        assert not (1 in n_new and max(n_new) > 1), (
            f"decodes ran in a forward padded to {max(n_new)} positions (chunks {n_new}): a decode (n == 1) "
            "must not be padded to a long prompt chunk")


@pytest.mark.exercise("5.2")
def test_static_batching_admits_only_when_nothing_runs():
    sched = b.StaticBatching(4, max_cache_tokens=100)
    first = b.Request([1, 2], 3, arrival=0.0)
    sched.add(first)
    out = sched.schedule(0.0)
    assert out.admitted == [first] and out.chunks == [(first, 2)]
    late = b.Request([3, 4], 3, arrival=0.1)
    sched.add(late)
    out = sched.schedule(0.2)
    assert out.admitted == [], "a static batch is formed only when nothing runs: nobody joins a running batch"
    assert out.chunks == [(first, first.num_pending)] and late.state is S.WAITING


# ---- 5.3 dynamic batching ---------------------------------------------------------------------

@pytest.mark.exercise("5.3")
def test_no_wake_time_while_a_batch_runs_even_with_requests_waiting():
    sched = b.DynamicBatching(2, max_wait_ms=10, max_cache_tokens=100)
    for i in range(3):
        sched.add(b.Request([1 + i], 2, arrival=0.0))
    assert sched.wake_time() == pytest.approx(0.010), "nothing runs: wake at the oldest arrival + max_wait_ms"
    assert len(sched.schedule(0.0).admitted) == 2 and len(sched.waiting) == 1
    assert sched.wake_time() is None, (
        "a batch is running: wake_time must be None (the next batch starts only once this one is done, "
        "whatever the waiting request's window says)")


# ---- 5.4 continuous batching ------------------------------------------------------------------

@pytest.mark.exercise("5.4")
def test_continuous_batching_charges_the_tokens_a_request_has():
    """Admission charges `tokens_needed` = every token a request knows now (prompt + output
    so far), not static batching's worst case; the requests admitted run in the same step."""
    sched = b.ContinuousBatching(4, max_cache_tokens=12)
    reqs = [b.Request([1, 2, 3, 4], 20, arrival=float(i), request_id=f"r{i}") for i in range(4)]
    for r in reqs:
        sched.add(r)
    out = sched.schedule(5.0)
    assert out.admitted == reqs[:3], "three 4-token prompts fit 12 cache tokens, whatever their max_new_tokens"
    assert [(r.request_id, n) for r, n in out.chunks] == [("r0", 4), ("r1", 4), ("r2", 4)], (
        "the chunks are planned after admission: who was admitted runs in this step")
    assert sched.tokens_held() == 12 and reqs[3] in sched.waiting


# ---- 5.5 chunked prefill ----------------------------------------------------------------------

@pytest.mark.exercise("5.5")
def test_the_budget_is_spent_once_decodes_first_and_nothing_is_planned_at_zero():
    sched = b.ContinuousBatching(3, max_tokens_per_step=6, max_cache_tokens=100)
    dec = b.Request([1, 2], 5, arrival=0.0, request_id="dec")
    p1 = b.Request(list(range(1, 5)), 2, arrival=1.0, request_id="p1")
    p2 = b.Request(list(range(1, 9)), 2, arrival=2.0, request_id="p2")
    sched.running = [p1, dec, p2]           # admission order: p1 was admitted first
    for r in sched.running:
        r.state = S.RUNNING
    dec.num_computed = 2
    dec.output.append(7)                    # dec decodes
    p1.num_computed = 1                     # 3 of p1's prompt left
    plan = [(r.request_id, n) for r, n in sched.plan_chunks()]
    assert plan == [("dec", 1), ("p1", 3), ("p2", 2)], (
        f"budget 6: the decode first (1), then the prefills in running order, each min(pending, what is "
        f"left): got {plan}")
    p1.num_computed, p2.num_computed = 4, 0
    p1.output.append(3)                     # p1 decodes now
    sched.max_tokens_per_step = 3
    plan = [(r.request_id, n) for r, n in sched.plan_chunks()]
    assert plan == [("p1", 1), ("dec", 1), ("p2", 1)], f"decodes in running order, then the prefills: got {plan}"
    sched.max_tokens_per_step = 2           # below the batch (the constructor refuses it): p2 gets 0
    plan = [(r.request_id, n) for r, n in sched.plan_chunks()]
    assert plan == [("p1", 1), ("dec", 1)], f"a request that gets 0 tokens is left out of the plan: got {plan}"



@pytest.mark.exercise("5.5")
def test_prefills_share_the_budget_in_admission_order_not_shortest_first():
    sched = b.ContinuousBatching(2, max_tokens_per_step=5, max_cache_tokens=100)
    long = b.Request(list(range(1, 9)), 2, arrival=0.0, request_id="long")
    short = b.Request([1, 2], 2, arrival=1.0, request_id="short")
    sched.running = [long, short]           # admission order: long first
    for r in sched.running:
        r.state = S.RUNNING
    plan = [(r.request_id, n) for r, n in sched.plan_chunks()]
    assert plan == [("long", 5)], (
        f"budget 5, two prompts running, 'long' (8 pending) admitted before 'short' (2): the prefills get the "
        f"budget in running (admission) order, each as much as is left, so 'long' takes all 5 and 'short' "
        f"waits; got {plan}")


# ---- 5.6 preemption, requeue, abort -----------------------------------------------------------

@pytest.mark.exercise("5.6")
def test_preempt_takes_as_many_as_it_takes_last_in_queue_order_first():
    """Victims one at a time, each the running request with the largest `order` (priority,
    then arrival): here two must go, the low-priority one first, though it arrived first."""
    sched = b.ContinuousBatching(4, max_cache_tokens=14)
    reqs = {name: b.Request([1, 2, 3], 8, priority=p, arrival=t, request_id=name)
            for name, p, t in (("low", 3, 0.0), ("a", 0, 1.0), ("b", 0, 2.0), ("c", 0, 3.0))}
    for r in reqs.values():
        sched.add(r)
    assert len(sched.schedule(4.0).admitted) == 4
    for r in sched.running:
        r.output.extend([1, 1])             # 4 x 5 = 20 > 14 cache tokens
    out = sched.schedule(5.0)
    got = [r.request_id for r in out.preempted]
    assert got == ["low", "c"], (f"preempted {got}: the victim is the running request LAST in queue order "
                                 "(lowest priority, then latest arrival), as many as it takes to fit")
    assert sched.tokens_held() == 10 <= sched.max_cache_tokens
    assert all(r.state is S.PREEMPTED and r not in sched.running for r in out.preempted)


@pytest.mark.exercise("5.6")
def test_the_victim_is_last_in_queue_order_not_the_last_admitted():
    """'low' (priority 5) ran alone before 'a' and 'b' came: it is first in `running` but last
    in queue order, so it is the victim, and one suffices."""
    sched = b.ContinuousBatching(3, max_cache_tokens=12)
    low = b.Request([1, 2, 3], 8, priority=5, arrival=0.0, request_id="low")
    sched.add(low)
    assert sched.schedule(0.5).admitted == [low]
    for name, t in (("a", 1.0), ("b", 2.0)):
        sched.add(b.Request([1, 2, 3], 8, arrival=t, request_id=name))
    assert len(sched.schedule(2.5).admitted) == 2
    for r in sched.running:
        r.output.extend([1, 1])             # 3 x 5 = 15 > 12 cache tokens
    admitted = [r.request_id for r in sched.running]
    out = b.SchedulerOutput()
    sched.preempt(3.0, out)
    got = [r.request_id for r in out.preempted]
    assert got == ["low"], (
        f"preempted {got}, running in admission order {admitted}: the "
        "victim is the running request last in QUEUE order (the largest Request.order: lowest priority, then "
        "latest arrival), not the last admitted")


@pytest.mark.exercise("5.6")
def test_preempt_stops_as_soon_as_the_running_requests_fit():
    """A cache exactly full is within capacity: holders of 5 + 5 + 2 tokens in a 10-token
    cache lose the last one only (10 <= 10), not two. `preempt` called alone (no 5.4)."""
    sched = b.ContinuousBatching(4, max_cache_tokens=10)
    reqs = [b.Request([1] * n, 8, arrival=float(i), request_id=name)
            for i, (name, n) in enumerate((("a", 3), ("b", 3), ("c", 2)))]
    for r in reqs:
        sched.add(r)
    sched.admit_fcfs(0.5, b.SchedulerOutput())  # given code: 8 of 10 tokens
    reqs[0].output.extend([1, 1])
    reqs[1].output.extend([1, 1])               # 5 + 5 + 2 = 12 > 10
    out = b.SchedulerOutput()
    sched.preempt(1.0, out)
    got = [r.request_id for r in out.preempted]
    assert got == ["c"], (
        f"preempted {got} where one victim suffices: with 'c' gone the running requests hold 10 of 10 "
        f"cache tokens, which fits (tokens_held() <= max_cache_tokens); preempt evicts only while they "
        f"hold MORE than the capacity")
    assert [r.request_id for r in sched.running] == ["a", "b"] and sched.tokens_held() == 10
    assert out.admitted == [], "preempt admits nobody"


@pytest.mark.exercise("5.6")
def test_a_preempted_request_is_requeued_at_its_old_place(model, checked):
    """The engine takes the victims back: row freed, `preemptions` + 1, WAITING at the step's
    start, and queued by its order: ahead of a request that arrived after it."""
    clock = b.ManualClock()
    engine = checked(b.Engine(model, b.ContinuousBatching(2, max_cache_tokens=20), clock=clock))
    r0 = engine.add_request(b.Request([1, 2, 3, 4], 12, request_id="r0"))
    clock.sleep(0.001)
    r1 = engine.add_request(b.Request([5, 6, 7, 8], 12, request_id="r1"))
    clock.sleep(0.001)
    while True:
        out = engine.step()
        clock.sleep(0.01)
        if out.preempted:
            break
        if len(engine.scheduler.running) == 2 and not engine.scheduler.waiting:
            engine.add_request(b.Request([9], 4, request_id="late"))  # arrives after both
    assert out.preempted == [r1]
    assert r1.preemptions == 1, "the engine counts each preemption in request.preemptions"
    assert r1.slot is None and r1.num_computed == 0, "a preempted request's cache row is freed (_release)"
    assert r1.state is S.WAITING and r1.events[-1].time == r1.events[-2].time, "WAITING at the step's start"
    waiting = [r.request_id for r in engine.scheduler.waiting]
    assert waiting[0] == "r1", f"the victim goes back to its old place in the queue (by order): {waiting}"


@pytest.mark.exercise("5.6")
def test_abort_of_a_waiting_request_and_twice(model, checked):
    engine = checked(b.Engine(model, b.ContinuousBatching(1), clock=b.ManualClock()))
    run = engine.add_request(b.Request([1, 2], 3, request_id="run"))
    wait = engine.add_request(b.Request([3, 4], 3, request_id="wait"))
    engine.step()
    assert engine.abort("wait") is True and wait.slot is None and wait not in engine.scheduler.waiting
    assert engine.abort("wait") is False, "aborting a finished request returns False and changes nothing"
    assert [e.reason for e in wait.events].count("abort") == 1
    assert engine.abort("run") is True and engine.free_slots == [0], "an aborted running request frees its row"
    assert not engine.has_unfinished()


# ---- 5.7 metrics ------------------------------------------------------------------------------

def _request(name, arrival, moves, token_times, reason="length"):
    r = b.Request([1, 2], max(1, len(token_times)), request_id=name)
    r.arrival = arrival
    r.events.append(b.Event(arrival, S.WAITING))
    times = sorted([(t, "move", s) for s, t in moves] + [(t, "token", None) for t in token_times],
                   key=lambda x: (x[0], x[1] == "token"))
    for t, kind, s in times:
        if kind == "move":
            r.transition(s, t)
        else:
            r.append_token(7, t)
    r.transition(S.FINISHED, max([t for _, t in moves] + list(token_times)), reason)
    return r


@pytest.mark.exercise("5.7")
def test_queue_ends_at_the_first_admission_and_ttft_counts_from_arrival():
    r = _request("p", 1.0, [(S.RUNNING, 1.5), (S.PREEMPTED, 2.5), (S.WAITING, 2.5), (S.RUNNING, 4.0)],
                 [2.0, 2.25, 4.5])
    m = b.request_metrics(r)
    assert m.queue == pytest.approx(0.5), "queue time ends at the FIRST RUNNING event (a preemption is not queueing)"
    assert m.ttft == pytest.approx(1.0), "TTFT is arrival -> first token, not admission -> first token"
    assert m.e2e == pytest.approx(3.5), f"e2e is arrival -> the last event (FINISHED at 4.5): got {m.e2e}"


@pytest.mark.exercise("5.7")
def test_itl_and_tpot_of_a_preempted_request_span_its_tokens():
    """Tokens at 2.0, 2.25 and 4.5 (a preemption between): two gaps, 0.25 and 2.25."""
    r = _request("p", 1.0, [(S.RUNNING, 1.5), (S.PREEMPTED, 2.5), (S.WAITING, 2.5), (S.RUNNING, 4.0)],
                 [2.0, 2.25, 4.5])
    m = b.request_metrics(r)
    assert m.itl == pytest.approx((0.25, 2.25)), f"ITL: the gaps between consecutive token times, got {m.itl}"
    assert m.tpot == pytest.approx(1.25), (
        f"TPOT = (last token time - first) / (tokens - 1) = 2.5 / 2 = 1.25 (the mean of the n - 1 gaps), got {m.tpot}")


@pytest.mark.exercise("5.7")
def test_summary_pools_every_gap_and_counts_every_token():
    steady = _request("steady", 0.0, [(S.RUNNING, 0.0)], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    stall = _request("stall", 0.0, [(S.RUNNING, 0.0)], [0.1, 1.1])
    gone = _request("gone", 0.0, [(S.RUNNING, 0.0)], [0.2, 0.4], reason="abort")
    s = b.summarize(b.RunResult("x", [steady, stall, gone], [], 0.0, 1.1, 2))
    assert s["requests"] == 2 and s["aborted"] == 1
    assert s["output_tokens"] == 10, "output_tokens counts the tokens of every request, aborted ones too"
    gaps = [0.1] * 5 + [1.0]                 # every gap of every completed request, pooled
    assert s["itl_p50_ms"] == pytest.approx(100.0), "itl percentiles are over every gap, not per-request means"
    assert s["itl_p99_ms"] == pytest.approx(1e3 * b.percentile(gaps, 99))
    assert s["tpot_p50_ms"] == pytest.approx(1e3 * b.percentile([0.1, 1.0], 50)), "tpot: one mean per request"
    assert s["tokens_per_s"] == pytest.approx(10 / 1.1)
    assert s["occupancy"] != s["occupancy"], "no steps: occupancy is NaN"
