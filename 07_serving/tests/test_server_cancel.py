"""7.4 Cancellation: a client that disconnects mid-stream, or before its first token, or a
non-streaming client that goes away, has its request aborted and its blocks freed."""

from __future__ import annotations

import asyncio

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
    assert 3 <= fake.calls < 1000, "poll, but do not spin"


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
