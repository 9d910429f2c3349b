"""7.4 Cancellation: a client that disconnects mid-stream, or before its first token, or a
non-streaming client that goes away, has its request aborted and its blocks freed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest

import course

srv = course.load("server")
pytestmark = pytest.mark.exercise("7.4")
M = "course-gpt"


class FakeRequest:
    """Starlette's Request as far as `until_disconnected` needs it."""

    def __init__(self, connected_for: int):
        self.calls, self.connected_for = 0, connected_for

    async def is_disconnected(self) -> bool:
        self.calls += 1
        return self.calls > self.connected_for


def test_until_disconnected_returns_when_the_client_is_gone():
    fake = FakeRequest(connected_for=3)
    asyncio.run(asyncio.wait_for(srv.until_disconnected(fake, poll_s=0.001), 2))
    assert fake.calls == 4


def test_until_disconnected_waits_while_the_client_is_there():
    fake = FakeRequest(connected_for=10 ** 9)

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(srv.until_disconnected(fake, poll_s=0.005), 0.1)

    asyncio.run(main())
    # 0.1 s of polls every 5 ms: at most ~20 (a busy machine gives fewer, never more); a loop
    # that does not sleep between polls asks thousands of times
    assert 1 <= fake.calls < 1000, f"poll, but do not spin: {fake.calls} polls in 0.1 s at poll_s=0.005"


def test_until_disconnected_keeps_the_event_loop_free():
    """While it waits, the loop serves everyone else: a ticker task keeps ticking."""
    fake = FakeRequest(connected_for=20)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.ensure_future(ticker())
        await asyncio.wait_for(srv.until_disconnected(fake, poll_s=0.001), 5)
        t.cancel()
        return ticks

    ticks = asyncio.run(main())
    assert fake.calls == 21, "ask until the first True, then stop asking"
    assert ticks >= 10, ("between two questions the wait must give the event loop back "
                         f"(`await asyncio.sleep(poll_s)`, never time.sleep): other tasks ran {ticks} times")


class QueueStream:
    """A TokenStream as far as `next_events` needs it: `get_batch` waits for one event."""

    def __init__(self):
        self.queue: asyncio.Queue = asyncio.Queue()

    async def get_batch(self):
        return [await self.queue.get()]


def test_next_events_returns_the_batch_while_the_client_is_there():
    async def main():
        stream, gone = QueueStream(), asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, stream.queue.put_nowait, ("delta", 0, "a"))
        got = await asyncio.wait_for(srv.next_events(stream, gone), 5)
        assert not gone.done(), "next_events must never cancel (nor finish) the shared watcher"
        gone.cancel()
        return got

    assert asyncio.run(main()) == [("delta", 0, "a")]


def test_next_events_is_none_when_the_client_left_and_loses_no_event():
    async def main():
        loop = asyncio.get_running_loop()
        stream, gone = QueueStream(), loop.create_future()
        loop.call_later(0.01, gone.set_result, None)
        first = await asyncio.wait_for(srv.next_events(stream, gone), 5)
        assert first is None, "the client left first: None"
        # the getter that lost the race must be gone: the next event goes to the next call
        stream.queue.put_nowait(("delta", 0, "b"))
        later = loop.create_future()
        try:
            got = await asyncio.wait_for(srv.next_events(stream, later), 2)
        except asyncio.TimeoutError:
            pytest.fail("an event put after a departure was lost: the get_batch that lost the race "
                        "was left waiting and took it (cancel it)")
        later.cancel()
        return got

    assert asyncio.run(main()) == [("delta", 0, "b")]


def test_next_events_a_ready_batch_wins_over_a_departure():
    async def main():
        loop = asyncio.get_running_loop()
        stream, gone = QueueStream(), loop.create_future()
        stream.queue.put_nowait(("finish", 0, "stop", 1, 1))
        gone.set_result(None)
        return await asyncio.wait_for(srv.next_events(stream, gone), 5)

    assert asyncio.run(main()) == [("finish", 0, "stop", 1, 1)], \
        "a batch that is ready is returned even if the client has left too (look at the batch first)"


def test_next_events_raises_what_a_broken_watcher_raised():
    async def main():
        loop = asyncio.get_running_loop()
        stream, gone = QueueStream(), loop.create_future()
        gone.set_exception(RuntimeError("the watcher broke"))
        return await asyncio.wait_for(srv.next_events(stream, gone), 5)

    with pytest.raises(RuntimeError, match="the watcher broke"):
        asyncio.run(main())


def test_stream_closed_aborts_only_a_stream_cut_short():
    class State:
        def __init__(self):
            self.aborted = []

        def abort(self, job, reason):
            self.aborted.append((job.id, reason))

    job = SimpleNamespace(id="j1", gen=SimpleNamespace(n=2))
    state = State()
    srv.stream_closed(state, job, 2)
    assert state.aborted == [], "a stream whose every choice finished is complete: nothing to abort"
    srv.stream_closed(state, job, 1)
    assert state.aborted == [("j1", "disconnect")], "one of two choices finished: the stream was cut short"
    srv.stream_closed(state, job, 0)
    assert state.aborted[-1] == ("j1", "disconnect") and len(state.aborted) == 2


@pytest.fixture(scope="module")
def slowish(start):
    return start(step_delay=0.02, max_batch_size=8, max_queue_tokens=1 << 20)  # no 503s here; >= 20 ms a token, so a request outlasts a loaded machine's lag in seeing its client leave


def test_disconnect_storm_leaks_nothing(slowish, kit):
    """50 streaming clients drop mid-stream (after their first token) or before it."""
    h = slowish
    n, max_tokens = 50, 100

    async def one(c, i):
        body = {"model": M, "prompt": f"client {i}", "max_tokens": max_tokens, "temperature": 0, "stream": True}
        try:
            if i % 5 == 0:  # gives up before its first token
                await c.post("/v1/completions", json=body, timeout=httpx.Timeout(5, read=0.02))
                return "done"
            async with c.stream("POST", "/v1/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        return "dropped"  # leaving the block closes the connection mid-stream
        except httpx.ReadTimeout:
            return "timed out"
        return "done"

    async def main():
        async with kit.async_client(h, timeout=20, limits=httpx.Limits(max_connections=n)) as c:
            return await asyncio.wait_for(asyncio.gather(*(one(c, i) for i in range(n))), 30)

    outcomes = asyncio.run(main())
    assert outcomes.count("dropped") == n - n // 5, outcomes
    kit.assert_clean(h)
    lines = h.state.finished_lines[-n:]
    aborted = [ln for ln in lines if ln["finish_reason"] == "abort"]
    assert len(aborted) >= outcomes.count("dropped"), "every dropped stream must be aborted"
    assert all(ln["output_tokens"] < max_tokens // 2 for ln in aborted), \
        "a dropped request must stop soon after its client left"


def test_non_streaming_client_that_goes_away(slowish, kit):
    h = slowish
    before = len(h.state.finished_lines)
    with pytest.raises(httpx.ReadTimeout):
        with kit.client(h, timeout=httpx.Timeout(5, read=0.15)) as c:
            c.post("/v1/completions", json={"model": M, "prompt": "bye", "max_tokens": 120, "temperature": 0})
    kit.assert_clean(h)
    new = h.state.finished_lines[before:]
    assert len(new) == 1 and new[0]["finish_reason"] == "abort", new
    assert new[0]["output_tokens"] < 120
