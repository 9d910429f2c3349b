# GENERATED from solutions/server/disconnect.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.4 Cancellation: the disconnect watch and the race against it: lines 24, 36, 46; `course check 7.4`, `course hint 7.4`
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
    raise NotImplementedError('Exercise 7.4: Cancellation: the disconnect watch and the race against it — see 07_serving.ipynb')


async def next_events(stream: TokenStream, gone: asyncio.Future) -> list[tuple] | None:
    """Wait for whichever comes first: the stream's next batch (`await stream.get_batch()`)
    or the client's departure (`gone`: a task running `until_disconnected`, shared by every
    wait of one request). Return the batch, or None when the client left and no batch is
    ready; when both are ready, the batch wins (it is already taken from the stream). A
    `gone` that raised is a broken watcher, not a departure: its exception is raised here.
    Leaves nothing waiting behind: a `get_batch` that lost the race is cancelled (a
    cancelled `get_batch` takes no event: the next call still gets it); `gone` itself is
    never cancelled (the handler waits on it again)."""
    raise NotImplementedError('Exercise 7.4: Cancellation: the disconnect watch and the race against it — see 07_serving.ipynb')


def stream_closed(state: ServerState, job: Job, finished: int) -> None:
    """A streaming response has ended, however it ended, with `finished` of the job's
    `job.gen.n` choices finished. Afterwards a stream cut short (fewer: the client went
    away, Starlette cancelling the response's generator on `http.disconnect`, or the
    stream was cut) has its job aborted by `state.abort(job, "disconnect")`, which the
    engine thread applies before its next step, so its blocks are free by then; a
    complete stream changes nothing."""
    raise NotImplementedError('Exercise 7.4: Cancellation: the disconnect watch and the race against it — see 07_serving.ipynb')
