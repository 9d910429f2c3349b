"""Prefix caching (6.6): chained block hashes, the allocator's index of cached blocks, rows started from it."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch


def hash_block(parent: bytes | None, tokens: Sequence[int]) -> bytes:
    """The prefix-cache key of a full block (given): 16 bytes of BLAKE2b chained over (the
    parent block's key, None for block 0; this block's tokens), so equal keys mean equal
    WHOLE prefixes, not just equal blocks. A hit still compares the stored tokens."""
    h = hashlib.blake2b(parent or b"\0", digest_size=16)
    h.update(np.asarray(tokens, dtype=np.int64).tobytes())
    return h.digest()


class PrefixIndex:
    """The allocator's prefix cache; `BlockAllocator` inherits it (state: `__init__`, below).

    `cached[h]`: the block registered under key h; `block_hash[b]`, `block_tokens[b]`: that
    block's key and tokens (a tuple of ints), None while b is not cached. A cached block
    keeps its entry while it is held AND once freed (it waits in the allocator's free
    queue), until `allocate` reuses it and forgets it (`_uncache`).
    """

    def lookup(self, block_hash: bytes, tokens: Sequence[int]) -> int | None:
        """The block registered under `block_hash` if its stored tokens equal `tokens`,
        else None (an unknown key too). Changes nothing."""
        # BEGIN SOLUTION 6.6
        # DECISION: what a block's key is (a hash chained from its parent's key and its own tokens,
        #   so equal blocks after different prefixes differ), when a hit is real (the stored tokens
        #   match, not just the hash), and where the match stops (the first miss).
        # HINT: A key is only a hash: a hit is the block under that key whose stored tokens
        #   are the same tokens. Everything `lookup` needs is in `cached` and `block_tokens`.
        block = self.cached.get(block_hash)
        if block is None or self.block_tokens[block] != tuple(tokens):
            return None
        return block
        # END SOLUTION

    def take(self, block: int) -> None:
        """A prefix-cache hit: one more holder of `block` (its count + 1). A block that was
        free (count 0) is no longer in the free queue afterwards: it is in use again and must
        not be evicted. Its cache entry stays. An id outside the pool: ValueError
        (`_check_ids`)."""
        (block,) = self._check_ids([block])
        # BEGIN SOLUTION 6.6
        if self.ref_counts[block] == 0:
            del self.free_queue[block]
        self.ref_counts[block] += 1
        # END SOLUTION

    def register(self, block: int, block_hash: bytes, tokens: Sequence[int]) -> bool:
        """Enter `block`, which has just become full, under `block_hash` with its `tokens`
        (stored as a tuple of ints); True when entered. If some block (this one included)
        is already registered under that key, or this block already has a key, change
        nothing and return False: the FIRST block for a key stays, a second one (two rows
        computed the same prefix at once) stays uncached and is freed as usual."""
        (block,) = self._check_ids([block])
        # BEGIN SOLUTION 6.6
        if block_hash in self.cached or self.block_hash[block] is not None:
            return False
        self.cached[block_hash] = block
        self.block_hash[block] = block_hash
        self.block_tokens[block] = tuple(int(t) for t in tokens)
        return True
        # END SOLUTION

    # -- given: the state, and the hook `allocate` calls on reuse
    # Besides its own state (`__init__`), the index uses the allocator's (allocator.py), declared
    # here so that a reader sees what `take` touches; it also calls the allocator's `_check_ids`.
    ref_counts: list[int]                   # holders of each block; 0: free
    free_queue: OrderedDict[int, None]      # the free blocks, least recently freed first

    def __init__(self, num_blocks: int):
        self.cached: dict[bytes, int] = {}
        self.block_hash: list[bytes | None] = [None] * num_blocks
        self.block_tokens: list[tuple[int, ...] | None] = [None] * num_blocks
        self.num_evicted = 0  # cached blocks forgotten because they were reused

    def is_cached(self, block: int) -> bool:
        """Whether `block` holds a registered full block (held or free)."""
        return self.block_hash[block] is not None

    def _uncache(self, block: int) -> None:
        """Forget `block`'s prefix-cache entry: it is about to hold other tokens (a stale
        entry would let a later lookup find someone else's K/V, a bug public engines shipped)."""
        h = self.block_hash[block]
        if h is not None and self.cached.get(h) == block:
            del self.cached[h]
            self.num_evicted += 1
        self.block_hash[block] = None
        self.block_tokens[block] = None


class PrefixSharing:
    """The paged cache's prefix caching; `PagedKVCache` inherits it (cache.py).

    `row_hashes[r]`: the keys of row r's leading full blocks that are already committed
    (entered into, or found in, the prefix cache), in order. With `enable_prefix_caching`
    off nothing is ever registered, so nothing is ever found.
    """

    # The state this part uses, all of it set by `PagedKVCache.__init__` (cache.py) and stage
    # 04's `_CacheBase`: declared here so that a reader sees what the methods below touch. It
    # also calls two methods of block_table.py's `BlockTables`: `_row_ids` and `_set_table`.
    lengths: torch.Tensor           # (batch,) int64: the valid tokens of each row
    allocator: PrefixIndex          # the cache's BlockAllocator: here only its prefix index is used
    block_size: int
    enable_prefix_caching: bool
    tables: list[list[int]]         # row r's blocks, in logical order (block_table.py)
    row_hashes: list[list[bytes]]   # row r's committed keys

    def match_prefix(self, tokens: Sequence[int], hashes: Sequence[bytes] | None = None) -> list[int]:
        """The cached blocks holding a prefix of `tokens`, in order; changes nothing.

        Only the blocks lying entirely within all of `tokens` but the last can hit: the last
        token is always computed, its logits are the next token's, even when the whole
        prompt is cached. Block i hits when the allocator's index (`lookup`) has a block
        under block i's key holding block i's tokens; the result is the longest run of hits
        from block 0 (a block after a miss never counts, even one the index has: it belongs
        to another prefix). `hashes`: the chained keys of `tokens`' full blocks, in order,
        at least as many as can hit (`prefix_hashes` of `tokens` when None)."""
        # BEGIN SOLUTION 6.6
        # HINT: Walk the blocks in order and stop at the first miss: a block after a miss
        #   belongs to another prefix, whatever its own tokens (that is what the chain is for).
        # HINT: n = (len(tokens) - 1) // block_size blocks can hit; block i holds
        #   tokens[i * bs:(i + 1) * bs], asked for with `self.allocator.lookup(hashes[i], ...)`.
        bs = self.block_size
        n = (len(tokens) - 1) // bs
        hashes = self.prefix_hashes(tokens, n) if hashes is None else hashes[:n]
        blocks = []
        for i, h in enumerate(hashes):
            b = self.allocator.lookup(h, tokens[i * bs:(i + 1) * bs])
            if b is None:
                break
            blocks.append(b)
        return blocks
        # END SOLUTION

    def assign_prefix(self, row: int, tokens: Sequence[int], hashes: Sequence[bytes] | None = None) -> int:
        """Start the EMPTY `row` from the prefix cache; return the number of cached tokens.

        Afterwards the row's table is `match_prefix(tokens, hashes)`'s blocks, each with one
        more holder (a hit, as `take` counts one); `row_hashes[row]` is their keys and
        `lengths[row]` = len(blocks) * block_size, which is returned. Prefix caching off:
        return 0, change nothing. A row outside the cache or not empty (blocks or length):
        ValueError."""
        (row,) = self._row_ids([row])
        if self.tables[row] or int(self.lengths[row]):
            raise ValueError(f"assign_prefix: row {row} is not empty")
        if not self.enable_prefix_caching:
            return 0
        if hashes is None:
            hashes = self.prefix_hashes(tokens)
        # BEGIN SOLUTION 6.6
        # HINT: The row takes what `match_prefix` finds: each block one more holder
        #   (`allocator.take`), the row's table (`_set_table`), its committed keys and its length.
        blocks = self.match_prefix(tokens, hashes)
        for b in blocks:
            self.allocator.take(b)
        self._set_table(row, blocks)
        self.row_hashes[row] = list(hashes[:len(blocks)])
        self.lengths[row] = len(blocks) * self.block_size
        return len(blocks) * self.block_size
        # END SOLUTION

    def commit(self, row: int, tokens: Sequence[int]) -> None:
        """Enter row's newly full blocks into the prefix cache (nothing when it is off).

        The row's first lengths[row] // block_size blocks are full. Afterwards
        `row_hashes[row]` holds the chained keys of all of them, in order, the keys
        `prefix_hashes` gives for those blocks of `tokens` (the entries already there kept,
        not recomputed), and every newly committed block was offered to the index's
        `register` under its key with its tokens (False, a key some other block holds, is
        fine: the key is in `row_hashes` either way). `tokens`: the row's tokens, at least
        lengths[row] of them."""
        if not self.enable_prefix_caching:
            return
        # BEGIN SOLUTION 6.6
        # HINT: Continue the chain from the last committed key (`row_hashes[row][-1]`): each
        #   new full block's key is hashed from its parent's key and its own tokens.
        # HINT: For i from len(row_hashes[row]) to lengths[row] // bs: h = hash_block(parent,
        #   chunk) (parent None for block 0), `allocator.register(tables[row][i], h, chunk)`,
        #   then append h.
        bs, done = self.block_size, self.row_hashes[row]
        n_full = int(self.lengths[row]) // bs
        for i in range(len(done), n_full):
            chunk = tokens[i * bs:(i + 1) * bs]
            h = hash_block(done[-1] if done else None, chunk)
            self.allocator.register(self.tables[row][i], h, chunk)
            done.append(h)
        # END SOLUTION

    def prefix_hashes(self, tokens: Sequence[int], n_blocks: int | None = None) -> list[bytes]:
        """The chained keys of the first n_blocks full blocks of `tokens` (default: all; given)."""
        bs = self.block_size
        n = len(tokens) // bs if n_blocks is None else n_blocks
        out, parent = [], None
        for i in range(n):
            parent = hash_block(parent, tokens[i * bs:(i + 1) * bs])
            out.append(parent)
        return out
