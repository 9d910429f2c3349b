# GENERATED from solutions/server/disconnect.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.4 Cancellation on client disconnect: lines 24, 34; `course check 7.4`, `course hint 7.4`
"""7.4 Cancellation: a client that goes away has its request aborted, its blocks freed."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fastapi import Request as HTTPRequest

if TYPE_CHECKING:
    from .engine_loop import Job
    from .state import ServerState


async def until_disconnected(request: HTTPRequest, poll_s: float = 0.02) -> None:
    """Return None once the client of `request` has gone away: the first time Starlette's
    `await request.is_disconnected()` answers True (it is not asked again after that);
    while the client is there, never return. It is asked about once every `poll_s`
    seconds, the event loop free in between (never spin). The handler races this against
    the answer: if it wins, the request is aborted (`ServerState.abort`)."""
    raise NotImplementedError('Exercise 7.4: Cancellation on client disconnect — see 07_serving.ipynb')


def stream_closed(state: ServerState, job: Job, finished: int) -> None:
    """A streaming response has ended, however it ended, with `finished` of the job's
    `job.gen.n` choices finished. Afterwards a stream cut short (fewer: the client went
    away, Starlette cancelling the response's generator on `http.disconnect`, or the
    stream was cut) has its job aborted by `state.abort(job, "disconnect")`, which the
    engine thread applies before its next step, so its blocks are free by then; a
    complete stream changes nothing."""
    raise NotImplementedError('Exercise 7.4: Cancellation on client disconnect — see 07_serving.ipynb')
