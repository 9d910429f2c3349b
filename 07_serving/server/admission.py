# GENERATED from solutions/server/admission.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.2 Admission control by KV blocks: 503 + Retry-After: lines 37, 42; `course check 7.2`, `course hint 7.2`
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
        raise NotImplementedError('Exercise 7.2: Admission control by KV blocks: 503 + Retry-After — see 07_serving.ipynb')

    def release(self, ticket: Ticket) -> None:
        """Hand a ticket's reservation back (blocks and tokens), once: mark it `released`;
        releasing it again changes nothing."""
        raise NotImplementedError('Exercise 7.2: Admission control by KV blocks: 503 + Retry-After — see 07_serving.ipynb')

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
