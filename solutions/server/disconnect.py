"""7.4 Cancellation: a client that goes away has its request aborted, its blocks freed."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fastapi import Request as HTTPRequest

if TYPE_CHECKING:
    from .engine_loop import Job
    from .state import ServerState


async def until_disconnected(request: HTTPRequest, poll_s: float = 0.02) -> None:
    """Return once the client of `request` has gone away: await Starlette's
    `request.is_disconnected()` (True once the client left) every `poll_s` seconds,
    sleeping between polls (never spin), and return the first time it says True; while
    the client is there, never return. The handler races this against the answer: if it
    wins, the request is aborted (`ServerState.abort`)."""
    # BEGIN SOLUTION 7.4
    # HINT: A loop: ask `await request.is_disconnected()`; while it is False, give the
    #   event loop back with `await asyncio.sleep(poll_s)` and ask again.
    while not await request.is_disconnected():
        await asyncio.sleep(poll_s)
    # END SOLUTION


def stream_closed(state: ServerState, job: Job, finished: int) -> None:
    """A streaming response has ended, however it ended: `finished` of the job's
    `job.gen.n` choices had finished. Fewer means the client went away (Starlette cancels
    the response's generator when it sees `http.disconnect`) or the stream was cut: then
    abort the job with `state.abort(job, "disconnect")` (applied by the engine thread
    before its next step, so its blocks are free by then); a complete stream changes
    nothing."""
    # BEGIN SOLUTION 7.4
    # HINT: Compare `finished` with `job.gen.n`; only a stream cut short is aborted, with
    #   the reason "disconnect" (the engine loop tells no client then: it is gone).
    if finished < job.gen.n:
        state.abort(job, "disconnect")
    # END SOLUTION
