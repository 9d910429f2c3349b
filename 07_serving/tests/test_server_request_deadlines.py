"""Per-request deadlines (given code): a request's own `first_token_timeout` and `timeout`,
bounded by the server's, and refused at admission when the queue ahead of it is measured to
take longer than its deadline (503 "deadline_unmeetable"), instead of being served late; and a
request's `priority`, which may only put it behind others. (The deadlines enforced over HTTP:
test_server_deadlines.py, 7.3.)"""

from __future__ import annotations

import pytest

import course
from solutions.batching import ManualClock

srv = course.load("server")
M = "course-gpt"


@pytest.fixture
def parse(monkeypatch):
    """`parse_request` (given) with 7.1's token budget, which it calls, out of the way."""
    monkeypatch.setattr(srv.validation, "token_budget", lambda body, kind, prompt_tokens, limits: (16, 1))

    def run(body, **limits):
        return srv.parse_request({"model": M, "prompt": "hi", **body}, "completion",
                                 srv.Limits(context=128, **limits))
    return run


@pytest.mark.given
def test_a_request_deadline_is_its_own_or_the_servers(parse):
    g = parse({"first_token_timeout": 0.5, "timeout": 2})
    assert (g.first_token_timeout, g.timeout) == (0.5, 2.0)
    g = parse({}, first_token_timeout=1.0, timeout=9.0)
    assert (g.first_token_timeout, g.timeout) == (1.0, 9.0), "none of its own: the server's"
    g = parse({"timeout": 3}, timeout=9.0)
    assert (g.first_token_timeout, g.timeout) == (None, 3.0), "shorter than the server's: its own"
    assert parse({}).timeout is None


@pytest.mark.given
@pytest.mark.parametrize("body, limits, param", [
    ({"timeout": 0}, {}, "timeout"), ({"timeout": -1}, {}, "timeout"), ({"timeout": "5"}, {}, "timeout"),
    ({"first_token_timeout": 0}, {}, "first_token_timeout"), ({"first_token_timeout": True}, {}, "first_token_timeout"),
    ({"timeout": 10}, {"timeout": 9.0}, "timeout"),
    ({"first_token_timeout": 1.5}, {"first_token_timeout": 1.0}, "first_token_timeout"),
])
def test_a_bad_or_too_long_deadline_is_a_400_naming_it(parse, body, limits, param):
    with pytest.raises(srv.APIError) as e:
        parse(body, **limits)
    assert (e.value.status, e.value.param) == (400, param), e.value.message


@pytest.mark.exercise("7.2")
def test_a_deadline_the_queue_cannot_meet_is_refused_at_admission():
    """Memory 4 blocks + a queue of 4; 2 blocks handed back in the first 2 s (1 block/s). With 6
    reserved, one more block starts after 3 blocks are handed back, about 3 s: a 2 s deadline is
    refused (503, counted), a 5 s one admitted. A request that fits the memory, or a server with
    nothing measured yet, is never refused for its deadline."""
    clock = ManualClock()
    a = srv.AdmissionControl(num_blocks=4, block_size=16, max_queue_tokens=64, clock=clock)
    assert a.admit_batch([8], 8, 1, "", deadline_s=0.001), "nothing measured: nothing to refuse"
    tickets = [a.admit_batch([8], 8) for _ in range(7)]
    clock.now = 2.0
    for t in tickets[:2]:
        a.served(t)
    assert a.reserved_blocks == 6 and a.service_rate() == 1.0
    assert a.expected_wait_s(1) == pytest.approx(3.0)
    rejected = a.rejected
    with pytest.raises(srv.APIError) as e:
        a.admit_batch([8], 8, 1, "", deadline_s=2.0)
    assert (e.value.status, e.value.code, e.value.headers.get("Retry-After")) == (503, "deadline_unmeetable", "1")
    assert a.rejected == rejected + 1 and a.reserved_blocks == 6 and a.capacity_blocks == 8
    assert a.admit_batch([8], 8, 1, "", deadline_s=5.0).blocks == 1
    b = srv.AdmissionControl(num_blocks=4, block_size=16, max_queue_tokens=64, clock=clock)
    assert b.admit_batch([8], 8, 1, "", deadline_s=0.001), "fits the memory: starts now"


@pytest.mark.given
def test_a_request_may_step_back_but_never_cut_in(parse, tiny_model):
    """`priority` (vLLM's name; lower runs first) is 0..MAX_PRIORITY: a client may put its own
    request behind others, and a negative one (ahead of everyone, taking their rows) is a 400
    naming it. The engine queues by it: a waiting priority-0 request goes before an earlier
    priority-5 one."""
    assert parse({}).priority == 0 and parse({"priority": 5}).priority == 5
    for bad in (-1, srv.protocol.MAX_PRIORITY + 1, 1.0, "1", True):
        with pytest.raises(srv.APIError) as e:
            parse({"priority": bad})
        assert (e.value.status, e.value.param) == (400, "priority"), bad
    from solutions.batching import Request
    from solutions.paged import PagedEngine

    engine = PagedEngine(tiny_model, srv.FairBatching(1), num_blocks=8, clock=ManualClock())
    first = engine.add_request(Request([1, 2, 3], 2))
    later, urgent = engine.add_request(Request([4, 5], 2, priority=5)), engine.add_request(Request([6, 7], 2))
    while engine.has_unfinished():
        engine.step()
        engine.clock.sleep(1.0)
    starts = [min(e.time for e in r.events if e.state.value == "running") for r in (first, urgent, later)]
    assert starts == sorted(starts) and starts[1] < starts[2]
