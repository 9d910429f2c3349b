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
        # BEGIN SOLUTION 7.5
        # DECISION: the thread boundary: which side may touch the asyncio queue (only the loop's
        #   thread: put hands the event over), how a slow reader is served (everything queued as one
        #   batch, without waiting again), and the exact SSE framing.
        # HINT: Do not touch `self.queue` from this thread: ask the loop to call
        #   `self.queue.put_nowait(event)` for you, `self.loop.call_soon_threadsafe(fn, arg)`.
        # HINT: Wrap that call in try/except RuntimeError (the loop is closed) and drop.
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # the event loop is closed
            pass
        # END SOLUTION

    async def get_batch(self) -> list[tuple]:
        """Wait until at least one event is queued; return it with every other event
        already queued, in order, as one list (a slow reader gets the tokens that piled up
        as ONE chunk instead of slowing the engine down)."""
        # BEGIN SOLUTION 7.5
        # HINT: `await self.queue.get()` for the first event (it waits), then take the rest
        #   with `get_nowait()` while the queue is not empty; never await for those.
        events = [await self.queue.get()]
        while not self.queue.empty():
            events.append(self.queue.get_nowait())
        return events
        # END SOLUTION


def sse(data: dict | str) -> bytes:
    """One Server-Sent Event as OpenAI (and vLLM) frame it, UTF-8 bytes: `data: `, the
    payload, then a blank line, `\\n\\n` (never CRLF). A str is sent as it is (the stream
    ends with `sse("[DONE]")`, `data: [DONE]\\n\\n`); a dict as the most compact JSON (no
    space after a `,` or a `:`), every non-ASCII character as its own UTF-8 bytes (never a
    `\\uXXXX` escape)."""
    # BEGIN SOLUTION 7.5
    # HINT: `json.dumps` the dict (not a str) with `separators=(",", ":")` and
    #   `ensure_ascii=False`; frame it with an f-string and `.encode("utf-8")`.
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"data: {text}\n\n".encode()
    # END SOLUTION
