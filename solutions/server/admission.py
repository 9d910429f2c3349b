"""7.2 Admission control by KV blocks: a 503 + Retry-After before any work is done."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from solutions.checks import check_int
from solutions.paged import blocks_needed

from .protocol import APIError, bad


class AdmissionControl:
    """Admit requests by the KV memory they may need, not by how many they are.

    `num_blocks` blocks of `block_size` tokens hold the KV memory of the running requests;
    an admitted request reserves its worst case, `request_blocks(...)`. What exceeds the
    memory waits in the engine's queue, bounded by `max_queue_tokens` tokens beyond it:
    at most `capacity_blocks` blocks are reserved at once. Counters: `reserved_blocks`,
    `reserved_tokens`, `admitted`, `rejected`; `draining` (set at shutdown) refuses all.
    Thread-safe (`self._lock`): the event loop admits, the engine thread releases.
    """

    def admit(self, prompt_tokens: int, max_tokens: int, n: int = 1) -> Ticket:
        """Reserve a request's worst case, `request_blocks(prompt_tokens, max_tokens, n,
        block_size)` blocks and n * (prompt_tokens + max_tokens) tokens; return its Ticket
        and count it in `admitted`. Refused, reserving nothing, checked in this order: more
        blocks than `num_blocks` -> APIError 400, param "max_tokens", code
        "kv_cache_too_small" (never fits, not counted); `draining` -> 503, code
        "shutting_down"; `reserved_blocks` + its blocks over `capacity_blocks` -> 503, code
        "overloaded". Both 503s: type "service_unavailable_error", header `Retry-After` =
        str(retry_after_s), and `rejected` += 1."""
        # BEGIN SOLUTION 7.2
        # HINT: Compute the need first (`request_blocks`); a need larger than the whole
        #   memory is the client's fault (400), before any lock.
        # HINT: Everything that reads or changes the counters happens under `self._lock`,
        #   or two threads both see room for the last blocks.
        # HINT: Under the lock: draining or `reserved_blocks + need > capacity_blocks` is a
        #   503 (count it in `rejected`); otherwise add to both reservations, count
        #   `admitted`, and return Ticket(need, tokens).
        need = request_blocks(prompt_tokens, max_tokens, n, self.block_size)
        if need > self.num_blocks:
            raise bad(f"this request may need {need} KV blocks of {self.block_size} tokens; the server has "
                      f"{self.num_blocks} in all", param="max_tokens", code="kv_cache_too_small")
        retry = {"Retry-After": str(self.retry_after_s)}
        with self._lock:
            if self.draining:
                self.rejected += 1
                raise APIError(503, "the server is shutting down", type="service_unavailable_error",
                               code="shutting_down", headers=retry)
            if self.reserved_blocks + need > self.capacity_blocks:
                self.rejected += 1
                raise APIError(503, f"the server is overloaded: {self.reserved_blocks} of {self.capacity_blocks} "
                                    f"KV blocks are reserved and this request needs {need}; retry later",
                               type="service_unavailable_error", code="overloaded", headers=retry)
            tokens = n * (prompt_tokens + max_tokens)
            self.reserved_blocks += need
            self.reserved_tokens += tokens
            self.admitted += 1
            return Ticket(need, tokens)
        # END SOLUTION

    def release(self, ticket: Ticket) -> None:
        """Hand a ticket's reservation back (blocks and tokens), once: mark it `released`;
        releasing it again changes nothing."""
        # BEGIN SOLUTION 7.2
        # HINT: Under the same lock: a released ticket returns at once; else flag it and
        #   subtract its blocks and tokens.
        with self._lock:
            if ticket.released:
                return
            ticket.released = True
            self.reserved_blocks -= ticket.blocks
            self.reserved_tokens -= ticket.tokens
        # END SOLUTION

    # -- given: construction and capacity
    def __init__(self, *, num_blocks: int, block_size: int, max_queue_tokens: int, retry_after_s: int = 1):
        self.num_blocks = check_int("num_blocks", num_blocks, 1)
        self.block_size = check_int("block_size", block_size, 1)
        self.max_queue_tokens = check_int("max_queue_tokens", max_queue_tokens, 0)
        self.retry_after_s = check_int("retry_after_s", retry_after_s, 1)
        self.reserved_blocks = 0
        self.reserved_tokens = 0
        self.admitted = 0
        self.rejected = 0
        self.draining = False
        self._lock = threading.Lock()

    @property
    def capacity_blocks(self) -> int:
        """Blocks that may be reserved at once: the memory plus the bounded queue."""
        return self.num_blocks + self.max_queue_tokens // self.block_size


@dataclass
class Ticket:
    """What an admitted request reserved; handed back with `AdmissionControl.release`."""

    blocks: int
    tokens: int
    released: bool = False


def request_blocks(prompt_tokens: int, max_tokens: int, n: int, block_size: int) -> int:
    """KV blocks a request may hold at worst: n sequences of prompt + max_tokens tokens,
    whose FULL prompt blocks are shared by copy-on-write (stage 06's fork), so they count
    once; every sequence owns the rest (`solutions.paged.blocks_needed` of its tokens)."""
    full_prompt = prompt_tokens // block_size
    return full_prompt + n * (blocks_needed(prompt_tokens + max_tokens, block_size) - full_prompt)
