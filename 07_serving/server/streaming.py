# GENERATED from solutions/server/streaming.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.5 The streaming bridge and SSE framing: lines 31, 37, 45; `course check 7.5`, `course hint 7.5`
"""7.5 The streaming bridge (engine thread -> event loop) and Server-Sent Events framing."""

from __future__ import annotations

import asyncio
import json


class TokenStream:
    """One HTTP request's events, carried from the engine thread to its coroutine.

    Events are tuples: ("delta", index, text), ("finish", index, reason, prompt_tokens,
    completion_tokens), ("error", APIError). The engine thread calls `put`, which must
    never block; asyncio objects may only be touched from their loop's thread, so `put`
    goes through `self.loop.call_soon_threadsafe` into `self.queue`, an unbounded
    asyncio.Queue. The coroutine awaits `get_batch`. Events come out in the order each
    thread put them, none lost, none twice.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()

    def put(self, event: tuple) -> None:
        """From any thread: queue `event` on the loop without blocking or waiting for it;
        return at once. A loop that is closed (the server is gone: `call_soon_threadsafe`
        raises RuntimeError) drops the event silently."""
        raise NotImplementedError('Exercise 7.5: The streaming bridge and SSE framing — see 07_serving.ipynb')

    async def get_batch(self) -> list[tuple]:
        """Wait until at least one event is queued; return it with every other event
        already queued, in order, as one list (a slow reader gets the tokens that piled up
        as ONE chunk instead of slowing the engine down)."""
        raise NotImplementedError('Exercise 7.5: The streaming bridge and SSE framing — see 07_serving.ipynb')


def sse(data: dict | str) -> bytes:
    """One Server-Sent Event as OpenAI (and vLLM) frame it, UTF-8 bytes: `data: `, the
    payload, then a blank line, `\\n\\n` (never CRLF). A str is sent as it is (the stream
    ends with `sse("[DONE]")`, `data: [DONE]\\n\\n`); a dict as JSON without spaces
    (`separators=(",", ":")`) and with non-ASCII kept as UTF-8 (`ensure_ascii=False`)."""
    raise NotImplementedError('Exercise 7.5: The streaming bridge and SSE framing — see 07_serving.ipynb')
