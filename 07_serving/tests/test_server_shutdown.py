"""7.7 Graceful shutdown: stop admitting (503), let in-flight requests finish within the
grace period or abort them (telling their clients), and exit 0."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from types import SimpleNamespace

import pytest

import course

srv = course.load("server")
pytestmark = pytest.mark.exercise("7.7")
M = "course-gpt"


class _Result(dict):
    """What a call made in a thread returned; reading "r" re-raises what it raised."""

    def __getitem__(self, key):
        if key == "r" and "error" in self:
            raise self["error"]
        return super().__getitem__(key)


def _in_thread(fn, *args, **kw):
    out = _Result()

    def run():
        try:
            out["r"] = fn(*args, **kw)
        except BaseException as e:  # re-raised in the test's thread (a stub's TODO included)
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, out


def _ended(flights) -> bool:
    return any(not t.is_alive() for t, _ in flights)


def _raise_early_errors(flights) -> None:
    """A call that ended before the test let it (a stub's TODO, a refusal): show why."""
    for t, out in flights:
        if not t.is_alive():
            out["r"]


class FakeState:
    """ServerState as far as `drain` needs it. `finish_after[job_id]`: the job's handler
    answers (leaves `jobs`) after that many turns of the event loop; an aborted job
    answers a few turns after its abort command (as the engine thread and the handler
    would)."""

    def __init__(self, finish_after: dict[str, int]):
        self.admission = SimpleNamespace(draining=False)
        self.jobs = {j: SimpleNamespace(id=j) for j in finish_after}
        self.finish_after = dict(finish_after)
        self.submitted: list[tuple] = []
        self.draining_seen_by_jobs: list[bool] = []
        self.turns_before_abort = 0  # turns of the event loop while drain waited out the grace
        self.loop = SimpleNamespace(submit=self._submit)

    def _submit(self, command):
        self.submitted.append(command)
        if command[0] == "abort":
            self.finish_after[command[1]] = 3

    def abort(self, job, reason):  # ServerState.abort, the same command
        self.loop.submit(("abort", job.id, reason))

    async def run_handlers(self):  # the handlers of the jobs in flight, on the event loop
        while True:
            await asyncio.sleep(0.001)
            self.draining_seen_by_jobs.append(self.admission.draining)
            self.turns_before_abort += not self.submitted
            for j in list(self.jobs):
                self.finish_after[j] -= 1
                if self.finish_after[j] <= 0:
                    del self.jobs[j]


def _drain(state: FakeState, grace_s: float, bound: float = 20.0) -> int:
    """Run drain beside the jobs' handlers. Its graces are seconds, not minutes: a drain that
    blocks the event loop (time.sleep in the coroutine) must fail with its rule, not hang."""
    in_flight = bool(state.jobs)

    async def main():
        handlers = asyncio.ensure_future(state.run_handlers())
        try:
            return await asyncio.wait_for(srv.drain(state, grace_s, poll_s=0.001), bound)
        except TimeoutError:
            raise AssertionError(f"drain had not returned after {bound:g} s (grace {grace_s:g} s, the jobs done "
                                 "in a few ms): it returns as soon as no job is in flight, not after the grace "
                                 "period") from None
        finally:
            handlers.cancel()

    out = asyncio.run(main())
    assert not in_flight or state.turns_before_abort, \
        ("the event loop never ran while drain waited out the grace period: wait with "
         "`await asyncio.sleep(...)`, never `time.sleep` in a coroutine (it stops the loop, and the "
         "answers drain waits for)")
    return out


def test_drain_waits_for_jobs_that_finish_within_the_grace_period():
    state = FakeState({"a": 5, "b": 40})
    assert _drain(state, grace_s=10.0) == 0, "both jobs finished within the grace period: nothing aborted"
    assert state.submitted == [], "no abort for a job that finished by itself"
    assert state.jobs == {}
    assert state.admission.draining, "draining stays set: newcomers keep getting 503"
    assert state.draining_seen_by_jobs and all(state.draining_seen_by_jobs), \
        "admission.draining must be set before the first wait (a newcomer admitted meanwhile would be lost)"


def test_drain_returns_as_soon_as_nothing_is_in_flight():
    state = FakeState({})
    assert _drain(state, grace_s=4.0, bound=2.0) == 0, "nothing in flight: return at once, not after the grace"
    state = FakeState({"a": 2})
    assert _drain(state, grace_s=4.0, bound=2.0) == 0, "return as soon as the last job has answered"


def test_drain_aborts_what_outlives_the_grace_period_and_waits_for_the_answers():
    state = FakeState({"quick": 2, "slow1": 10 ** 9, "slow2": 10 ** 9})
    assert _drain(state, grace_s=0.3) == 2, "drain returns how many jobs it had to abort"
    aborted = [c for c in state.submitted if c[0] == "abort"]
    assert sorted(c[1] for c in aborted) == ["slow1", "slow2"], "abort exactly the jobs still in flight"
    for _, _, err in aborted:
        assert isinstance(err, srv.APIError), "the abort carries the APIError the client is told"
        assert (err.status, err.type, err.code) == (503, "service_unavailable_error", "shutting_down")
    assert state.jobs == {}, "on return the aborted jobs' handlers have answered (wait for them after aborting)"


def test_in_flight_requests_finish_and_newcomers_get_503(start, kit):
    gate = threading.Event()  # closed: the engine holds its requests until the newcomer was refused
    h = start(shutdown_grace_s=20, gate=gate)
    c = kit.client(h, timeout=30)
    body = {"model": M, "prompt": "finish me", "max_tokens": 80, "temperature": 0}
    flights = [_in_thread(c.post, "/v1/completions", json=body) for _ in range(3)]
    kit.wait_until(lambda: kit.health(h)["in_flight"] == 3 or _ended(flights), what="3 requests in flight")
    _raise_early_errors(flights)
    stopper, stopped = _in_thread(h.stop, 30.0)
    kit.wait_until(lambda: h.state.admission.draining or not stopper.is_alive(), what="the drain to begin")
    late = c.post("/v1/completions", json=body)
    assert late.status_code == 503, late.text
    assert late.json()["error"]["code"] == "shutting_down" and "Retry-After" in late.headers
    gate.set()
    for t, out in flights:
        t.join(30)
        r = out["r"]
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    stopper.join(30)
    assert not stopper.is_alive() and not h.thread.is_alive(), "the server did not stop"
    assert stopped["r"] == 0, "nothing needed aborting"
    assert not h.state.loop._thread.is_alive(), "the engine thread must stop with the server"
    c.close()


def test_past_the_grace_period_requests_are_aborted_and_told(start, kit):
    h = start(step_delay=0.02, shutdown_grace_s=0.2)
    c = kit.client(h, timeout=20)
    body = {"model": M, "prompt": "too long", "max_tokens": 120, "temperature": 0}
    plain, got = _in_thread(c.post, "/v1/completions", json=body)
    stream_started = threading.Event()

    def streamed():
        with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            stream_started.set()
            return r.status_code, r.read()

    streaming, got_stream = _in_thread(streamed)
    flights = [(plain, got), (streaming, got_stream)]
    # both in flight, and the stream's 200 already sent (its first token came), before the stop
    kit.wait_until(lambda: (kit.health(h)["in_flight"] == 2 and stream_started.is_set()) or _ended(flights),
                   what="2 requests in flight, one of them streaming")
    _raise_early_errors(flights)
    # 120 steps of >= 20 ms each: neither request can finish on its own within the 0.2 s
    # grace period, so both must be aborted (a drain that waited for them would say 0)
    aborted = h.stop(30.0)
    plain.join(10)
    streaming.join(10)
    assert aborted == 2, "the requests still running after the grace period must be aborted"
    r = got["r"]
    assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down", r.text
    status, raw = got_stream["r"]
    assert status == 200
    events = kit.sse_events(raw)
    assert json.loads(events[-2])["error"]["code"] == "shutting_down"
    assert not h.thread.is_alive()
    lines = h.state.finished_lines
    assert len(lines) == 2 and all(ln["finish_reason"] == "abort" for ln in lines)
    c.close()


def test_a_signal_drains_like_stop(start, kit):
    """SIGINT / SIGTERM reach uvicorn's `handle_exit`: the same drain, then the server stops."""
    gate = threading.Event()  # closed: the request stays in flight until the newcomer was refused
    h = start(shutdown_grace_s=20, gate=gate)
    c = kit.client(h, timeout=30)
    body = {"model": M, "prompt": "signal", "max_tokens": 80, "temperature": 0}
    flight, got = _in_thread(c.post, "/v1/completions", json=body)
    kit.wait_until(lambda: kit.health(h)["in_flight"] == 1 or _ended([(flight, got)]), what="a request in flight")
    _raise_early_errors([(flight, got)])
    h.server.handle_exit(signal.SIGTERM, None)
    kit.wait_until(lambda: h.state.admission.draining or not h.thread.is_alive(), what="the drain to begin")
    assert c.post("/v1/completions", json=body).status_code == 503
    gate.set()
    flight.join(30)
    assert got["r"].status_code == 200
    h.thread.join(30)
    assert not h.thread.is_alive()
    c.close()
