"""7.8 Priority lanes (lanes.py): `lane` and `lane_rank`, and `LaneBatching`, the fair
scheduler in two lanes. On a fake clock (one tick of 1 s a step) with one engine row where
the order matters, so every figure is a count of steps, the same on any machine."""

from __future__ import annotations

from collections import Counter

import pytest

import course
from solutions.batching import ContinuousBatching, ManualClock, Request
from solutions.paged import PagedEngine

srv = course.load("server")
SHORT = 64  # the tests' interactive bound: prompt + max_new_tokens <= 64


def _engine(model, rows=1, blocks=64, wait=1000.0, policy=None):
    sched = policy(rows, max_tokens_per_step=256) if policy else srv.LaneBatching(
        rows, max_tokens_per_step=256, short_tokens=SHORT, max_wait_s=wait)
    return PagedEngine(model, sched, num_blocks=blocks, clock=ManualClock())


def _started(reqs) -> list:
    """The requests in the order their first tokens came."""
    return sorted(reqs, key=lambda r: (r.token_times[0], r.seq))


def _req(prompt_len, max_new, first=1, **kw):
    return Request(range(first, first + prompt_len), max_new, **kw)


@pytest.mark.exercise("7.8")
def test_a_lane_is_the_worst_case_against_the_bound_or_the_wait():
    at = Request(range(40), 24)
    at.arrival = 10.0
    assert srv.lane(at, 10.0, short_tokens=64, max_wait_s=5) == 0, "40 + 24 = 64 tokens: at the bound is interactive"
    over = Request(range(40), 25)
    over.arrival = 10.0
    assert srv.lane(over, 10.0, short_tokens=64, max_wait_s=5) == 1, "40 + 25 = 65 > 64: batch"
    assert srv.lane(Request(range(10), 60), 10.0, short_tokens=64, max_wait_s=5) == 1, \
        "the worst case counts max_new_tokens, not the prompt alone"
    assert srv.lane(over, 14.9, short_tokens=64, max_wait_s=5) == 1, "4.9 s of waiting: not yet"
    assert srv.lane(over, 15.0, short_tokens=64, max_wait_s=5) == 0, "5 s since its arrival: aged into the lane"
    assert srv.lane(Request(range(40), 25), 1e9, short_tokens=64, max_wait_s=5) == 1, \
        "a request with no arrival yet has not waited"


@pytest.mark.exercise("7.8")
def test_short_requests_go_first_and_each_lane_is_first_come_first_served(tiny_model, kit):
    """One row; at step 0 two long requests, then three short ones (the second the longest
    of them): the short ones run first, in their arrival order, then the long ones in
    theirs. Under FCFS the long ones would go first."""
    longs = [_req(40, 40, 1 + i) for i in range(2)]
    shorts = [_req(8, 8, 10), _req(30, 30, 20), _req(4, 4, 30)]
    kit.run_steps(_engine(tiny_model), [(0, r) for r in longs + shorts])
    got = _started(longs + shorts)
    assert got == shorts + longs, ("run order (prompt + max_new_tokens): "
                                   f"{[len(r.prompt) + r.max_new_tokens for r in got]}; expected the short ones "
                                   "(<= 64) first, each lane in arrival order (16, 60, 8, then 80, 80)")
    fcfs = [_req(40, 40, 1 + i) for i in range(2)] + [_req(8, 8, 10)]
    kit.run_steps(_engine(tiny_model, policy=ContinuousBatching), [(0, r) for r in fcfs])
    assert _started(fcfs) == fcfs, "the control: first come, first served runs the long ones first"


@pytest.mark.exercise("7.8")
def test_the_lane_comes_before_the_priority_and_the_priority_within_a_lane(tiny_model, kit):
    batch_urgent = _req(40, 40, 1, priority=0)
    late_short = _req(8, 8, 10, priority=5)
    urgent_short = _req(8, 8, 20, priority=1)
    reqs = [batch_urgent, late_short, urgent_short]
    kit.run_steps(_engine(tiny_model), [(0, r) for r in reqs])
    assert _started(reqs) == [urgent_short, late_short, batch_urgent], (
        f"run order (lane, priority): {[(int(len(r.prompt) + r.max_new_tokens > SHORT), r.priority) for r in _started(reqs)]}"
        "; every interactive request before every batch one, then lower priority first")


@pytest.mark.exercise("7.8")
def test_a_long_request_is_not_starved_by_a_stream_of_short_ones(tiny_model, kit):
    """One row; a long request at step 0, and a short one (3 steps of work) arriving every
    other step for 80 steps: without aging, the long one waits for the whole stream. With
    `max_wait_s` 10 it joins the interactive lane at step 10 as its oldest request, and
    starts once the row is free."""
    long = _req(40, 40, 1)
    shorts = [(k, _req(6, 3, 50 + k % 40)) for k in range(0, 80, 2)]
    kit.run_steps(_engine(tiny_model, wait=10.0), [(0, _req(6, 3, 99)), (0, long)] + shorts)
    start = long.token_times[0] - long.arrival
    assert start <= 10 + 5, f"the long request started {start:g} steps after it arrived (aging bound: 10)"
    assert any(r.token_times[0] > long.token_times[0] for _, r in shorts), "the stream went on after it"


@pytest.mark.exercise("7.8")
def test_preemption_takes_the_batch_lane_before_the_interactive_one(tiny_model, kit):
    """Two rows, 7 blocks of 16 tokens: a long request from step 0 and a short one from step 1
    outgrow the memory while they decode. The victim is the long one (batch lane), although
    the short one came later; the short one is never preempted. (The fair scheduler alone,
    one client, would take the latest, the short one.)"""
    long, short = _req(40, 60, 1), _req(30, 30, 100)
    engine = _engine(tiny_model, rows=2, blocks=7)
    kit.run_steps(engine, [(0, long), (1, short)])
    assert engine.num_preemptions > 0, "the test's load must outgrow the memory"
    assert short.preemptions == 0 and long.preemptions > 0, (
        f"preempted: short {short.preemptions}, long {long.preemptions} times; the victim is the running request "
        "of greatest key: the batch lane's")
    control_long, control_short = _req(40, 60, 1), _req(30, 30, 100)
    kit.run_steps(_engine(tiny_model, rows=2, blocks=7, policy=srv.FairBatching), [(0, control_long),
                                                                                     (1, control_short)])
    assert control_short.preemptions > 0, "the control: without lanes the latest request is the victim"


@pytest.mark.exercise("7.8")
def test_one_key_orders_admission_and_victims():
    """`lane_rank`: least first for admission, greatest first for preemption; between two
    clients of one lane and priority, the one holding less memory first."""
    now = 100.0
    a, b, c = _req(8, 8, 1, client="a"), _req(8, 8, 2, client="b"), _req(40, 40, 3, client="a")
    for i, r in enumerate((a, b, c)):
        r.arrival, r.seq = 99.0, i
    usage = Counter({"a": 50, "b": 10})
    keys = {r: srv.lane_rank(r, usage, now, SHORT, 5.0) for r in (a, b, c)}
    assert min(keys, key=keys.get) is b, "b holds less memory: its request goes first"
    assert max(keys, key=keys.get) is c, "the batch request is the first victim"
    c.arrival = 90.0
    assert srv.lane_rank(c, usage, now, SHORT, 5.0) < srv.lane_rank(a, usage, now, SHORT, 5.0), \
        "aged into the interactive lane, the long request keeps its place by arrival (before a, which came later)"


@pytest.mark.given
def test_lane_batching_checks_its_bounds():
    for kw in ({"short_tokens": 0}, {"short_tokens": 1.5}, {"max_wait_s": -1}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            srv.LaneBatching(2, **kw)
