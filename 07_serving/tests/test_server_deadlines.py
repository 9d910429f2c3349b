"""7.3 Deadlines: a request past its first-token or total deadline is aborted, its
blocks freed, and the client told (504, or a last stream event naming the deadline)."""

from __future__ import annotations

import json

import pytest

import course
from course.slowdown import machine_slowdown
from solutions.batching import ContinuousBatching, Engine, ManualClock, Request

srv = course.load("server")
pytestmark = pytest.mark.exercise("7.3")
M = "course-gpt"
# The deadlines scale with the machine (its load now: 1 when quiet, up to 10x when busy), so a
# quiet machine's check waits half a second a deadline, and a busy one keeps its margin.
SLOWDOWN = machine_slowdown(measure=False).factor
DEADLINE = 0.5 * SLOWDOWN  # seconds
STEP = DEADLINE / 50  # slept a step: a 100-token request takes >= 2 deadlines


def _request(tiny_model, clock):
    engine = Engine(tiny_model, ContinuousBatching(2), clock=clock)
    return engine, engine.add_request(Request([1, 2, 3], 5), arrival=10.0)


def test_deadline_reason(tiny_model):
    clock = ManualClock(10.0)
    engine, r = _request(tiny_model, clock)
    late = srv.deadline_reason
    assert late(r, 10.5, first_token_s=1.0, total_s=2.0) is None
    assert late(r, 11.5, first_token_s=1.0, total_s=2.0) == "first_token"
    assert late(r, 11.5, first_token_s=None, total_s=2.0) is None
    assert late(r, 12.5, first_token_s=None, total_s=2.0) == "total", \
        "2.5 s after arrival, past a total deadline of 2 s: 'total'"
    assert late(r, 99.0, first_token_s=None, total_s=None) is None
    assert late(r, 12.5, first_token_s=1.0, total_s=2.0) == "first_token", \
        "past both deadlines with no token yet: the first-token deadline wins"
    assert late(r, 11.0, first_token_s=1.0, total_s=2.0) is None, "exactly at the first-token deadline is not past it"
    clock.now = 10.2
    engine.step()  # prefill: the first token exists now
    assert r.output
    assert late(r, 11.5, first_token_s=1.0, total_s=2.0) is None, "the first token came in time"
    assert late(r, 12.0, first_token_s=1.0, total_s=2.0) is None, "exactly at the deadline is not past it"
    assert late(r, 12.01, first_token_s=1.0, total_s=2.0) == "total", \
        "the total deadline runs from the request's arrival (10 s), not from its first token"
    engine.abort(r.request_id)
    assert late(r, 50.0, first_token_s=1.0, total_s=2.0) is None, "a finished request is never late"
    fresh = Request([1, 2], 3)
    assert fresh.arrival is None
    assert late(fresh, 50.0, first_token_s=1.0, total_s=2.0) is None, "a request without an arrival is never late"


# The deadlines leave a loaded machine room: a 100-token request takes >= 2 DEADLINEs (STEP a
# step, slept), so it always misses the deadline, however fast the machine; what must be in
# time (2 tokens, or a first token) has a DEADLINE (0.5 s on a quiet machine, scaled with its
# load) for what takes ~0.05 s on an idle one.
def test_total_deadline_is_504_and_frees_everything(start, kit):
    h = start(step_delay=STEP, timeout_s=DEADLINE)
    with kit.client(h) as c:
        r = c.post("/v1/completions", json={"model": M, "prompt": "slow", "max_tokens": 100, "temperature": 0})
        assert r.status_code == 504, r.text
        err = r.json()["error"]
        assert err["code"] == "deadline_total" and "deadline" in err["message"]
        fast = c.post("/v1/completions", json={"model": M, "prompt": "fast", "max_tokens": 2, "temperature": 0})
        assert fast.status_code == 200, "a request within its deadline is served"
    kit.assert_clean(h)
    assert any(ln["finish_reason"] == "abort" for ln in h.state.finished_lines)


def test_deadline_mid_stream_is_a_last_event(start, kit):
    h = start(step_delay=STEP, timeout_s=DEADLINE)
    with kit.client(h) as c:
        with c.stream("POST", "/v1/completions", json={"model": M, "prompt": "slow", "max_tokens": 100,
                                                        "temperature": 0, "stream": True}) as r:
            assert r.status_code == 200
            events = kit.sse_events(r.read())
    payloads = [json.loads(e) for e in events[:-1]]
    assert any("choices" in p for p in payloads), "tokens came before the deadline"
    assert "error" in payloads[-1] and payloads[-1]["error"]["code"] == "deadline_total"
    kit.assert_clean(h)


def test_first_token_deadline_while_queued(start, kit):
    """One request holds the only row; the next one waits and misses its first-token deadline."""
    import threading

    h = start(step_delay=STEP, max_batch_size=1, first_token_timeout_s=DEADLINE)  # "a": >= 2 DEADLINEs
    with kit.client(h) as c:
        results = {}

        def first():
            try:
                results["a"] = c.post("/v1/completions", json={"model": M, "prompt": "a", "max_tokens": 100,
                                                               "temperature": 0})
            except BaseException as e:  # re-raised below, in the test's thread
                results["error"] = e
        t = threading.Thread(target=first)
        t.start()
        # "a" holds the row (>= 100 steps of STEP) before "b" is sent: a readiness signal, not a sleep
        kit.wait_until(lambda: kit.health(h)["running"] == 1 or not t.is_alive(), what='"a" to be running')
        if "error" in results:
            raise results["error"]
        r = c.post("/v1/completions", json={"model": M, "prompt": "b", "max_tokens": 5, "temperature": 0})
        t.join(20)
        if "error" in results:
            raise results["error"]
        assert r.status_code == 504 and r.json()["error"]["code"] == "deadline_first_token", r.text
        assert results["a"].status_code == 200, "the running request keeps going"
    kit.assert_clean(h)


def test_a_request_sets_its_own_shorter_deadline(start, kit):
    """Per-request deadlines: a body's `timeout` shortens the server's deadline (504 as for the
    server's own); one longer than the server's is a 400 naming the field, before any work."""
    h = start(step_delay=STEP, timeout_s=20 * DEADLINE)
    with kit.client(h) as c:
        r = c.post("/v1/completions", json={"model": M, "prompt": "slow", "max_tokens": 100, "temperature": 0,
                                            "timeout": DEADLINE})
        assert r.status_code == 504 and r.json()["error"]["code"] == "deadline_total", r.text
        r = c.post("/v1/completions", json={"model": M, "prompt": "x", "max_tokens": 2, "timeout": 30 * DEADLINE})
        assert r.status_code == 400 and r.json()["error"]["param"] == "timeout", r.text
    kit.assert_clean(h)
