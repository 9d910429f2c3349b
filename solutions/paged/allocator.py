"""The block allocator (6.1): a fixed pool of KV blocks, its free queue, reference counts."""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence

from solutions.checks import check_int
from solutions.kv_cache import CacheFullError

from .prefix import PrefixIndex


class BlockAllocator(PrefixIndex):
    """A pool of `num_blocks` KV blocks of `block_size` tokens each (state: `__init__`, below).

    `ref_counts[b]`: how many block tables hold block b. A block with count 0 is FREE and
    sits in `free_queue`, an OrderedDict of ids used as a queue (its front is reused next);
    a held block never does. Running out is no crash: `can_allocate(n)` says whether n
    blocks are free, and `allocate` raises CacheFullError, changing nothing.
    The prefix cache (6.6, `PrefixIndex`) keeps freed full blocks findable: `is_cached(b)`.
    """

    def allocate(self, n: int = 1) -> list[int]:
        """Take n blocks from the FRONT of `free_queue`, in queue order, each with count 1;
        return their ids. n not an int >= 0: ValueError. Fewer than n free: CacheFullError,
        nothing changed. A taken block is no longer in the prefix cache afterwards (not
        `is_cached`; the given `_uncache` forgets an entry): a lookup must never find it
        holding someone else's tokens."""
        n = check_int("n", n, 0)
        # BEGIN SOLUTION 6.1
        # DECISION: the free queue's order as an eviction policy: allocation takes from the front, a
        #   freed block goes to the back if its contents may be reused (cached) and to the front
        #   otherwise, a row's blocks freed in reverse so its tail is evicted first; check before
        #   change.
        # HINT: Check first, then change: with too few free blocks nothing may be taken.
        # HINT: `free_queue.popitem(last=False)` takes the front block; a block that
        #   `is_cached` is `_uncache`d before its count becomes 1.
        if n > len(self.free_queue):
            raise CacheFullError(f"need {n} free KV blocks, {len(self.free_queue)} of {self.num_blocks} are free")
        blocks = []
        for _ in range(n):
            block, _ = self.free_queue.popitem(last=False)
            if self.is_cached(block):
                self._uncache(block)
            self.ref_counts[block] = 1
            blocks.append(block)
        return blocks
        # END SOLUTION

    def fork(self, blocks: Sequence[int]) -> None:
        """Share `blocks` with one more holder: each count + 1. Only blocks in use can be
        shared: a free one is a ValueError (naming it "free"), an id outside the pool a
        ValueError ("outside", `_check_ids`); either way nothing changes."""
        blocks = self._check_ids(blocks)
        # BEGIN SOLUTION 6.1
        for b in blocks:
            if self.ref_counts[b] < 1:
                raise ValueError(f"block {b} is free: only a block in use can be shared")
        for b in blocks:
            self.ref_counts[b] += 1
        # END SOLUTION

    def free(self, blocks: Sequence[int]) -> None:
        """One holder lets go of `blocks` (its block table, in table order): each count - 1.

        Checked before anything changes: an id outside the pool is a ValueError
        ("outside"), a block already free a ValueError ("already free": a double free), and
        so is a block listed more times than it is held.
        The blocks are released LAST FIRST (reversed table order); one whose count reaches
        0 joins `free_queue`: at the BACK if `is_cached` (kept as long as possible), else at
        the FRONT (nothing worth keeping: reused first). So a table's uncached blocks come
        back head first, and of its cached ones the tail is evicted before the head (a
        later request more likely shares the head)."""
        blocks = self._check_ids(blocks)
        # BEGIN SOLUTION 6.1
        # HINT: Adding to an OrderedDict puts a key at the back; `move_to_end(b, last=False)`
        #   moves it to the front. Walk `reversed(blocks)`.
        for b, times in Counter(blocks).items():  # a block listed twice lets go twice
            if self.ref_counts[b] < times:
                raise ValueError(f"block {b} is already free (double free)")
        for b in reversed(blocks):
            self.ref_counts[b] -= 1
            if self.ref_counts[b] == 0:
                self.free_queue[b] = None
                if not self.is_cached(b):
                    self.free_queue.move_to_end(b, last=False)
        # END SOLUTION

    # -- given: the state and the helpers
    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = check_int("num_blocks", num_blocks, 1)
        self.block_size = check_int("block_size", block_size, 1)
        self.ref_counts = [0] * self.num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(self.num_blocks))
        PrefixIndex.__init__(self, self.num_blocks)  # cached, block_hash, block_tokens, num_evicted

    @property
    def num_free_blocks(self) -> int:
        """Blocks nobody holds (cached ones included: they can be evicted at any time)."""
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def usage(self) -> float:
        """Used blocks / all blocks, 0..1."""
        return self.num_used_blocks / self.num_blocks

    def can_allocate(self, n: int) -> bool:
        return n <= len(self.free_queue)

    def _check_ids(self, blocks: Sequence[int]) -> list[int]:
        ids = [int(b) for b in blocks]
        bad = [b for b in ids if not 0 <= b < self.num_blocks]
        if bad:
            raise ValueError(f"block ids {bad} are outside the pool's blocks 0..{self.num_blocks - 1}")
        return ids

    def check(self) -> None:
        """Assert the allocator's own invariants (tests call it after every operation)."""
        free = set(self.free_queue)
        assert len(free) == len(self.free_queue)
        for b in range(self.num_blocks):
            assert self.ref_counts[b] >= 0, f"block {b} has a negative reference count"
            assert (self.ref_counts[b] == 0) == (b in free), f"block {b}: count {self.ref_counts[b]}, free {b in free}"
        for h, b in self.cached.items():
            assert self.block_hash[b] == h and self.block_tokens[b] is not None, f"cached hash of block {b} is stale"

    def __repr__(self) -> str:
        return (f"BlockAllocator(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"free={self.num_free_blocks}, cached={len(self.cached)})")
