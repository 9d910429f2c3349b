"""Fairness between clients (given code, fairness.py): one client's flood of requests does
not hold up another client's requests. On a fake clock (one tick a step), so every figure is
a count of engine steps, the same on any machine."""

from __future__ import annotations

import pytest

import course
from solutions.batching import ContinuousBatching, ManualClock, Request, State
from solutions.paged import PagedEngine

srv = course.load("server")
pytestmark = pytest.mark.given

ROWS, BUDGET, BLOCKS = 8, 64, 24  # a small engine: 8 rows, 64 tokens a step, 24 blocks of 16 tokens
FLOOD, QUIET = 100, 2             # requests of the flooding client, of the quiet one: 50x the load


def _engine(model, policy):
    return PagedEngine(model, policy(ROWS, max_tokens_per_step=BUDGET), num_blocks=BLOCKS, clock=ManualClock())


def _flood():
    return [(0, Request(range(1 + i % 7, 41 + i % 7), 40, client="flood")) for i in range(FLOOD)]


def _quiet():
    return [(10 + 20 * k, Request(range(50 + k, 58 + k), 4, client="quiet")) for k in range(QUIET)]


def _ttft(requests):
    return [r.token_times[0] - r.arrival for r in requests]


def test_a_flood_does_not_hold_up_a_quiet_client(tiny_model, kit):
    """The quiet client's first token comes within a step of its time alone under the fair
    scheduler, while first come, first served makes it wait behind the flood's queue."""
    alone = _quiet()
    kit.run_steps(_engine(tiny_model, srv.fairness.FairBatching), alone)
    alone_ttft = _ttft(r for _, r in alone)
    assert max(alone_ttft) <= 1.0  # admitted and prefilled in the step it arrives before

    fair = _quiet()
    kit.run_steps(_engine(tiny_model, srv.fairness.FairBatching), _flood() + fair)
    fcfs = _quiet()
    kit.run_steps(_engine(tiny_model, ContinuousBatching), _flood() + fcfs)
    fair_ttft, fcfs_ttft = _ttft(r for _, r in fair), _ttft(r for _, r in fcfs)
    assert max(fair_ttft) <= max(alone_ttft) + 1.0, f"fair: quiet TTFTs {fair_ttft} steps, alone {alone_ttft}"
    assert min(fcfs_ttft) > 20, f"the test's flood is no flood: FCFS quiet TTFTs {fcfs_ttft} steps"


def test_one_client_is_scheduled_as_first_come_first_served(tiny_model, kit):
    """With one client, the fair scheduler is stage 05's, step for step: the same tokens at the
    same ticks, under memory pressure (preemptions) and a token budget (chunked prefill)."""
    runs = []
    for policy in (srv.fairness.FairBatching, ContinuousBatching):
        engine = PagedEngine(tiny_model, policy(4, max_tokens_per_step=16), num_blocks=6, clock=ManualClock())
        reqs = [(i // 3, Request(range(1 + i, 20 + 2 * i), 12 + i)) for i in range(9)]
        kit.run_steps(engine, reqs)
        runs.append(([r.output for _, r in reqs], [r.token_times for _, r in reqs], engine.num_preemptions))
    assert runs[1][2] > 0, "the test's load should preempt"
    assert runs[0] == runs[1]


def test_each_client_keeps_its_own_queue_order(tiny_model, kit):
    """Fairness reorders clients, never one client's requests: each client's requests first
    run in the order they arrived (stage 05's queue order)."""
    flood, quiet = _flood(), _quiet()
    engine = _engine(tiny_model, srv.fairness.FairBatching)
    kit.run_steps(engine, flood + quiet)
    for reqs in (flood, quiet):
        first_run = [min(e.time for e in r.events if e.state.value == "running") for _, r in reqs]
        assert first_run == sorted(first_run)


def test_fairness_preempts_only_the_client_holding_most(tiny_model, kit):
    """A fairness preemption takes memory from the flooding client, never from the quiet one,
    and does not ping-pong: the quiet client's requests are never preempted."""
    flood, quiet = _flood(), _quiet()
    engine = _engine(tiny_model, srv.fairness.FairBatching)
    kit.run_steps(engine, flood + quiet)
    assert all(r.preemptions == 0 for _, r in quiet)
    assert sum(r.preemptions for _, r in flood) >= 1, "the quiet client never needed room: no flood"
    assert all(r.finished and len(r.output) == r.max_new_tokens for _, r in flood + quiet)


def _running(sched, requests):
    """Admit `requests` (arrivals 0, 1, 2, ... in list order) into `sched`, which has room."""
    for t, r in enumerate(requests):
        r.arrival = float(t)
        sched.add(r)
    out = sched.schedule(0.0)
    assert len(out.admitted) == len(requests) and set(map(id, out.admitted)) == set(map(id, requests))
    return requests


def test_the_step_budget_goes_round_robin_over_clients():
    """Prefills share the step's budget by rounds: every client's first prefill before any
    client's second, the client holding less memory first within a round."""
    sched = srv.fairness.FairBatching(8, max_tokens_per_step=40, max_cache_tokens=1000)
    flood = [Request(range(1, 21), 4, client="flood") for _ in range(3)]
    quiet = Request(range(1, 11), 4, client="quiet")
    _running(sched, [*flood, quiet])
    assert sched.plan_chunks() == [(quiet, 10), (flood[0], 20), (flood[1], 10)]


def test_a_newcomers_prefill_gets_a_step_of_its_own():
    """A client with no decoding request (a quiet client's next request) has a prefill to
    run while another client decodes: the step runs the newcomer's prefill alone, so its
    first token costs a step of its own size; the next step is stage 05's again."""
    sched = srv.fairness.FairBatching(8, max_tokens_per_step=64, max_cache_tokens=1000)
    flood = _running(sched, [Request(range(1, 21), 4, client="flood") for _ in range(3)])
    for r in flood[:2]:
        r.num_computed = len(r.prompt)  # prefilled: decoding now
        r.output.append(7)
    quiet = Request(range(1, 11), 4, client="quiet")
    quiet.arrival = 5.0
    sched.add(quiet)
    out = sched.schedule(1.0)
    assert out.admitted == [quiet] and out.chunks == [(quiet, 10)], out.chunks
    quiet.num_computed = 10
    quiet.output.append(7)
    assert sched.plan_chunks() == [(flood[0], 1), (flood[1], 1), (quiet, 1), (flood[2], 20)], \
        "no newcomer left: decodes first, then prefills (stage 05's budget)"
    other = Request(range(1, 9), 4, client="other")
    other.arrival = 6.0
    sched.add(other)
    assert sched.schedule(2.0).chunks == [(other, 8)], "another newcomer: a step of its own"
    late = Request(range(1, 7), 4, client="late")
    late.arrival = 7.0
    sched.add(late)
    assert (flood[0], 1) in sched.schedule(3.0).chunks, "never two such steps in a row: the others decode"


def test_preemption_victims_are_the_latest_of_the_client_holding_most():
    """A fairness preemption (a waiting quiet request finds no free row) and a memory
    preemption both take the flooding client's LATEST running request, never the quiet one's."""
    sched = srv.fairness.FairBatching(4, max_tokens_per_step=64, max_cache_tokens=1000)
    flood = [Request(range(1, 21), 4, client="flood") for _ in range(3)]
    quiet = [Request(range(1, 5), 4, client="quiet") for _ in range(2)]
    _running(sched, [*flood, quiet[0]])
    quiet[1].arrival = 9.0
    sched.add(quiet[1])
    out = sched.schedule(1.0)
    assert (out.preempted, out.admitted) == ([flood[2]], [quiet[1]])  # its row goes to the quiet request
    assert flood[2].state is State.PREEMPTED
    sched.max_cache_tokens = 48  # 2 x 20 flood tokens + 2 x 4 quiet: fits; 1 token less, one must leave
    assert sched.schedule(2.0).preempted == []
    sched.max_cache_tokens = 47
    out = sched.schedule(3.0)
    assert (out.preempted, out.admitted) == ([flood[1]], [])


@pytest.mark.parametrize("name", ["fair", "fcfs", "priority"])
def test_make_engine_takes_the_scheduling_policy(tiny_model, name):
    engine = srv.engine.make_engine(tiny_model, max_batch_size=2, num_blocks=8, scheduling_policy=name)
    assert isinstance(engine.scheduler, srv.engine.SCHEDULING_POLICIES[name])
    with pytest.raises(ValueError, match="scheduling_policy"):
        srv.engine.make_engine(tiny_model, scheduling_policy="lottery")


def test_the_user_field_names_the_client(monkeypatch):
    """The body's `user` (OpenAI's field) is the client the engine is shared with; one longer
    than MAX_USER is a 400 naming `user`, so no client sends the engine megabytes of name.
    (`parse_request` is given; 7.1's token budget, which it calls, is not what this tests.)"""
    monkeypatch.setattr(srv.validation, "token_budget", lambda body, kind, prompt_tokens, limits: (16, 1))
    limits = srv.Limits(context=128, vocab_size=257, max_n=4)
    assert srv.parse_request({"model": "course-gpt", "prompt": "hi", "user": "alice"}, "completion", limits).client \
        == "alice"
    assert srv.parse_request({"model": "course-gpt", "messages": [{"role": "user", "content": "hi"}]}, "chat",
                             limits).client == ""
    with pytest.raises(srv.APIError) as e:
        srv.parse_request({"model": "course-gpt", "prompt": "hi", "user": "x" * (srv.protocol.MAX_USER + 1)},
                          "completion", limits)
    assert (e.value.status, e.value.param) == (400, "user")


def _fill(a, client, blocks=1):
    """Admit `client`'s one-block requests until a 503; the tickets admitted."""
    tickets = []
    while True:
        try:
            tickets.append(a.admit_batch([8], 16 * blocks - 8, 1, client))
        except srv.APIError as e:
            assert (e.status, e.code) == (503, "overloaded")
            return tickets


@pytest.mark.exercise("7.2")
def test_a_flood_that_filled_the_queue_does_not_get_a_quiet_client_refused():
    """Admission (7.2's rule plus the given fair_allowance): a lone client fills the capacity
    (memory + queue) and is refused past it, as before; a quiet client then still gets up to
    its fair share (half, with two clients) beyond it, and no more. Once the flood's tickets
    are served, the quiet client alone sees the plain rule again."""
    a = srv.AdmissionControl(num_blocks=4, block_size=16, max_queue_tokens=64)  # capacity 4 + 4 blocks
    flood = _fill(a, "flood")
    assert (len(flood), a.fair_allowance("flood")) == (8, 0), "a lone client: the plain rule"
    assert a.fair_allowance("quiet") == 4
    quiet = _fill(a, "quiet")
    assert len(quiet) == 4 and a.reserved_blocks == 12 and a.held_by == {"flood": 8, "quiet": 4}
    assert _fill(a, "flood") == [], "the flood holds more than its share: refused"
    for t in flood:
        a.served(t)
    a.served(flood[0])  # served twice: nothing more is handed back
    assert a.held_by == {"quiet": 4} and a.reserved_blocks == 4
    assert len(_fill(a, "quiet")) == 4, "alone again: up to the capacity, no allowance"


def test_a_step_that_preempts_for_memory_still_admits_another_client():
    """Stage 05's step that preempts for memory admits nobody (against thrashing). Here its
    victims are the flooding client's, and the same step admits the quiet client's waiting
    request (a fairness preemption making room if need be), never the flood's own: under
    steady memory pressure the quiet request would otherwise wait for a step that does not
    preempt."""
    sched = srv.fairness.FairBatching(8, max_tokens_per_step=64, max_cache_tokens=1000)
    flood = [Request(range(1, 21), 4, client="flood") for _ in range(3)]
    _running(sched, flood)
    late_flood, quiet = Request(range(1, 5), 4, client="flood"), Request(range(1, 5), 4, client="quiet")
    late_flood.arrival, quiet.arrival = 8.0, 9.0
    sched.add(late_flood)
    sched.add(quiet)
    sched.max_cache_tokens = 59  # the flood's 60 tokens: one of them must leave
    out = sched.schedule(1.0)
    assert out.preempted == [flood[2]] and out.admitted == [quiet], (out.preempted, out.admitted)
    assert late_flood.state is State.WAITING, "the victims' client admits nobody in a step that preempted it"
    sched.max_cache_tokens = 20 + 4  # room for one flood request and the quiet one only
    out = sched.schedule(2.0)
    assert out.preempted == [flood[1]] and quiet in sched.running, (out.preempted, out.admitted)


def test_a_step_that_preempts_for_memory_preempts_nobody_else_for_its_victims():
    """The victims' client admits nobody in a memory-preempting step, so no fairness
    preemption is made for it either: here the victim is client a's running request
    (priority 5, the greatest rank), a's next request is the only one waiting, and client c,
    holding more, keeps its rows."""
    sched = srv.fairness.FairBatching(8, max_tokens_per_step=64, max_cache_tokens=1000)
    c = [Request(range(1, 21), 4, client="c") for _ in range(2)]
    a = Request(range(1, 5), 4, client="a", priority=5)
    _running(sched, [*c, a])
    a_next = Request(range(1, 5), 4, client="a", priority=5)
    a_next.arrival = 3.0
    sched.add(a_next)
    sched.max_cache_tokens = 43  # 20 + 20 + 4 held: one must leave, and then a's next 4 do not fit
    out = sched.schedule(1.0)
    assert (out.preempted, out.admitted) == ([a], []), (out.preempted, out.admitted)
    assert all(r in sched.running for r in c) and a_next in sched.waiting
