# GENERATED from solutions/server/streaming.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.5 The streaming bridge and SSE framing: lines 33, 39, 48; `course check 7.5`, `course hint 7.5`
"""7.5 The streaming bridge (engine thread -> event loop) and Server-Sent Events framing."""

from __future__ import annotations

import asyncio
import json


class TokenStream:
    """One HTTP request's events, carried from the engine thread to its coroutine.

    Events are the engine's named tuples (engine_client.py), each equal to its plain
    tuple: ("delta", index, text), ("finish", index, reason, prompt_tokens,
    completion_tokens), ("error", APIError). The engine thread calls `put`, which never
    blocks; the coroutine awaits `get_batch`. Events not yet read wait in `self.queue`,
    an unbounded asyncio.Queue of `self.loop`, which (like every asyncio object) only
    that loop's thread may touch. Events come out in the order each thread put them,
    none lost, none twice.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()

    def put(self, event: tuple) -> None:
        """Safe from any thread; returns at once, never blocking nor waiting for the loop:
        `event` reaches `self.queue` soon after, on the loop's thread, behind the events
        this thread put before it. Once the loop is closed (the server is gone) the event
        is dropped silently: nothing is raised."""
        raise NotImplementedError('Exercise 7.5: The streaming bridge and SSE framing — see 07_serving.ipynb')

    async def get_batch(self) -> list[tuple]:
        """Wait until at least one event is queued; return it with every other event
        already queued, in order, as one list (a slow reader gets the tokens that piled up
        as ONE chunk instead of slowing the engine down)."""
        raise NotImplementedError('Exercise 7.5: The streaming bridge and SSE framing — see 07_serving.ipynb')


def sse(data: dict | str) -> bytes:
    """One Server-Sent Event as OpenAI (and vLLM) frame it, UTF-8 bytes: `data: `, the
    payload, then a blank line, `\\n\\n` (never CRLF). A str is sent as it is (the stream
    ends with `sse("[DONE]")`, `data: [DONE]\\n\\n`); a dict as the most compact JSON (no
    space after a `,` or a `:`), every non-ASCII character as its own UTF-8 bytes (never a
    `\\uXXXX` escape)."""
    raise NotImplementedError('Exercise 7.5: The streaming bridge and SSE framing — see 07_serving.ipynb')
