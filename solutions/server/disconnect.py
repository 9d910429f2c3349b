"""7.4 Cancellation: a client that goes away has its request aborted, its blocks freed."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fastapi import Request as HTTPRequest

if TYPE_CHECKING:
    from .state import Job, ServerState
    from .streaming import TokenStream


async def until_disconnected(request: HTTPRequest, poll_s: float = 0.02) -> None:
    """Return None once the client of `request` has gone away: the first time Starlette's
    `await request.is_disconnected()` answers True (it is not asked again after that);
    while the client is there, never return. It is asked about once every `poll_s`
    seconds, the event loop free in between (never spin). The handler races this against
    the answer: if it wins, the request is aborted (`ServerState.abort`)."""
    # BEGIN SOLUTION 7.4
    # DECISION: the race: what to wait on at once (the next batch and the departure), who wins a tie
    #   (the batch already taken), what must be cancelled so nothing waits behind (the losing get,
    #   never the shared watcher), and how a broken watcher is told from a departure.
    # HINT: This is polling: ask, and while the client is still there pause and ask again;
    #   the pause must be an `await`, so that the loop keeps serving the other requests.
    # HINT: A loop: ask `await request.is_disconnected()`; while it is False, give the
    #   event loop back with `await asyncio.sleep(poll_s)` and ask again.
    while not await request.is_disconnected():
        await asyncio.sleep(poll_s)
    # END SOLUTION


async def next_events(stream: TokenStream, gone: asyncio.Future) -> list[tuple] | None:
    """Wait for whichever comes first: the stream's next batch (`await stream.get_batch()`)
    or the client's departure (`gone`: a task running `until_disconnected`, shared by every
    wait of one request). Return the batch, or None when the client left and no batch is
    ready; when both are ready, the batch wins (it is already taken from the stream). A
    `gone` that raised is a broken watcher, not a departure: its exception is raised here.
    Leaves nothing waiting behind: a `get_batch` that lost the race is cancelled (a
    cancelled `get_batch` takes no event: the next call still gets it); `gone` itself is
    never cancelled (the handler waits on it again)."""
    # BEGIN SOLUTION 7.4
    # HINT: Two things to wait for at once: make the batch a task too
    #   (`asyncio.ensure_future(stream.get_batch())`) and `await asyncio.wait({get, gone},
    #   return_when=asyncio.FIRST_COMPLETED)`.
    # HINT: Look at `get` first (`get.done()`: the batch wins a tie). Otherwise the
    #   getter is still waiting: cancel it, or it would take the next event for nobody.
    # HINT: `gone.result()` returns None for a client that left and raises what a broken
    #   watcher raised: call it before returning None.
    get = asyncio.ensure_future(stream.get_batch())
    await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
    if get.done():
        return get.result()
    get.cancel()
    gone.result()
    return None
    # END SOLUTION


def stream_closed(state: ServerState, job: Job, finished: int) -> None:
    """A streaming response has ended, however it ended, with `finished` of the job's
    `job.gen.n` choices finished. Afterwards a stream cut short (fewer: the client went
    away, Starlette cancelling the response's generator on `http.disconnect`, or the
    stream was cut) has its job aborted by `state.abort(job, "disconnect")`, which the
    engine thread applies before its next step, so its blocks are free by then; a
    complete stream changes nothing."""
    # BEGIN SOLUTION 7.4
    # HINT: Compare `finished` with `job.gen.n`; only a stream cut short is aborted, with
    #   the reason "disconnect" (the engine loop tells no client then: it is gone).
    if finished < job.gen.n:
        state.abort(job, "disconnect")
    # END SOLUTION
