"""Stage 06: paged attention — KV memory in fixed-size blocks, shared prefixes, copy-on-write.

Stage 05's cache gives every running request one row of `max_len` positions. Most of it
is never used: a request that stops after 40 tokens still holds 256 positions, and a
server reserves for the longest answer it might give. The vLLM paper (Kwon et al., SOSP
2023, "Efficient Memory Management for Large Language Model Serving with PagedAttention")
measured 20.4-38.2% of KV memory holding real tokens in earlier systems. Paging fixes it
the way an operating system does: memory is a pool of fixed-size BLOCKS of `block_size`
tokens; a sequence owns a BLOCK TABLE (logical block i -> physical block id), and gets a
new block only when its last one is full, so it wastes less than one block.

Blocks also make sharing cheap. Two sequences that start with the same tokens (a common
system prompt) can point at the same physical blocks (PREFIX CACHING: a full block is
identified by a hash chained over its parent's hash and its own tokens); a request that
samples n answers to one prompt (parallel sampling) FORKS: its n sequences share the
prompt's blocks, and one that writes into a shared block first gets its own copy
(COPY-ON-WRITE). A reference count per block says when a block may be reused.

The pieces (shapes: B sequences, H heads, D head dim, T new tokens, N tokens written):

    BlockAllocator              the pool: free queue (LRU), reference counts         (6.1)
    blocks_needed, slot_mapping block tables -> the slot of every token             (6.2)
    PagedKVCache                per-layer K/V pools (num_blocks, block_size, H, D),
                                stage 04's cache protocol on blocks                  (6.2, 6.3)
    paged_attention             attention read through the block tables (PyTorch)    (6.4)
    paged_decode_triton         the same for decode, as a Triton kernel              (6.5)
    hash_block + the cache's    prefix caching                                       (6.6)
      match/commit methods
    PagedKVCache.fork_row,      fork and copy-on-write                               (6.7)
      copy-on-write in reserve
    PagedEngine                 stage 05's engine and schedulers on paged memory     (6.8)

`PagedKVCache` implements stage 04's cache protocol (`reserve` / `write` / `view`,
`lengths`), so stage 04's `forward_cached` runs on it unchanged, and it adds the protocol's
optional `attend`, which reads the pools through the block tables instead of building a
dense (B, H, L, D) view. `PagedEngine` is stage 05's `Engine` with that cache: the same
schedulers, the same outputs, token for token — only the memory is paged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from solutions.batching import ContinuousBatching, Engine, Request, Scheduler, State, StepOutput, default_model
from solutions.gpt import GPT, on_one_thread
from solutions.kv_cache import CacheFullError, _CacheBase, generate

try:  # Triton is optional: the dev extra installs it on Linux x86-64
    import triton
    import triton.language as tl

    HAS_TRITON = True
except Exception:  # pragma: no cover - depends on the platform
    triton = tl = None
    HAS_TRITON = False

__all__ = [
    "CacheFullError", "BlockAllocator", "blocks_needed", "slot_mapping", "PagedKVCache", "paged_attention",
    "paged_decode_triton", "HAS_TRITON", "triton_interpreting", "hash_block", "PagedEngine", "demo",
]


def _int_at_least(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


# ---- 6.1 the block allocator -------------------------------------------------------------

class BlockAllocator:
    """A fixed pool of `num_blocks` KV blocks of `block_size` tokens each.

    Every block has a reference count: how many sequences' block tables hold it. A block
    with count 0 is FREE and sits in `free_queue`, an ordered dict used as a queue:
    `allocate` takes blocks from its front, `free` puts blocks back. Running out is not a
    crash: `can_allocate(n)` says whether n blocks are there, and `allocate` raises
    `CacheFullError` (leaving everything as it was) when they are not — the scheduler acts
    on it by waiting or preempting.

    Prefix caching (6.6) adds a second life to a freed block: a FULL block whose tokens are
    known keeps its hash in `cached` while it sits in the free queue, so a later request
    with the same prefix can take it back (`take`) instead of recomputing it. The queue is
    in LRU order: a hashed block goes to the back when freed (evicted last), a block with
    nothing worth keeping goes to the front (reused first), and `allocate` evicts from the
    front, forgetting the hash of whatever it takes.
    """

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = _int_at_least("num_blocks", num_blocks, 1)
        self.block_size = _int_at_least("block_size", block_size, 1)
        self.ref_counts = [0] * self.num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(self.num_blocks))
        # prefix cache (6.6): hash -> block, and each cached block's hash and tokens
        self.cached: dict[bytes, int] = {}
        self.block_hash: list[bytes | None] = [None] * self.num_blocks
        self.block_tokens: list[tuple[int, ...] | None] = [None] * self.num_blocks
        self.num_evicted = 0  # cached blocks whose content was overwritten

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

    def allocate(self, n: int = 1) -> list[int]:
        """Take n free blocks from the front of the free queue, each with reference count 1.

        All or nothing: if fewer than n blocks are free, raise CacheFullError and change
        nothing. A block taken from the queue may still be in the prefix cache: forget its
        hash first (`_uncache`), or a later lookup would find this block holding someone
        else's tokens (a stale hash entry: a bug public engines shipped).
        """
        n = _int_at_least("n", n, 0)
        # BEGIN SOLUTION 6.1
        if n > len(self.free_queue):
            raise CacheFullError(f"need {n} free KV blocks, {len(self.free_queue)} of {self.num_blocks} are free")
        blocks = []
        for _ in range(n):
            block, _ = self.free_queue.popitem(last=False)
            if self.block_hash[block] is not None:
                self._uncache(block)
            self.ref_counts[block] = 1
            blocks.append(block)
        return blocks
        # END SOLUTION

    def fork(self, blocks: Sequence[int]) -> None:
        """Share blocks with one more sequence: each one's reference count goes up by one.
        Only blocks in use can be shared (ValueError for a free one)."""
        blocks = self._check_ids(blocks)
        # BEGIN SOLUTION 6.1
        for b in blocks:
            if self.ref_counts[b] < 1:
                raise ValueError(f"block {b} is free: only a block in use can be shared")
        for b in blocks:
            self.ref_counts[b] += 1
        # END SOLUTION

    def free(self, blocks: Sequence[int]) -> None:
        """One sequence lets go of `blocks` (its block table, in order). Each count drops by
        one; a block that reaches 0 joins the free queue — at the back if it is in the
        prefix cache (keep it as long as possible), else at the front (nothing to keep).
        Blocks are released last one first, so that of one sequence's cached blocks its
        tail is evicted before its head (a later request more likely shares the head).
        Freeing a block that is already free is a ValueError (a double free)."""
        blocks = self._check_ids(blocks)
        # BEGIN SOLUTION 6.1
        for b in blocks:
            if self.ref_counts[b] < 1:
                raise ValueError(f"block {b} is already free (double free)")
        for b in reversed(blocks):
            self.ref_counts[b] -= 1
            if self.ref_counts[b] == 0:
                self.free_queue[b] = None
                if self.block_hash[b] is None:
                    self.free_queue.move_to_end(b, last=False)
        # END SOLUTION

    # -- the prefix cache (6.6)
    def lookup(self, block_hash: bytes, tokens: Sequence[int]) -> int | None:
        """The cached block with this hash, if its stored tokens really are `tokens`."""
        # BEGIN SOLUTION 6.6
        block = self.cached.get(block_hash)
        if block is None or self.block_tokens[block] != tuple(tokens):
            return None
        return block
        # END SOLUTION

    def take(self, block: int) -> None:
        """A prefix-cache hit: one more sequence holds `block`. If it was free, it leaves
        the free queue (it is in use again, so it must not be evicted)."""
        (block,) = self._check_ids([block])
        # BEGIN SOLUTION 6.6
        if self.ref_counts[block] == 0:
            del self.free_queue[block]
        self.ref_counts[block] += 1
        # END SOLUTION

    def register(self, block: int, block_hash: bytes, tokens: Sequence[int]) -> bool:
        """Enter a block that has just become full into the prefix cache. If another block
        already holds this hash (two requests computed the same prefix at once), keep the
        first and return False; the second stays private and is freed as usual."""
        (block,) = self._check_ids([block])
        # BEGIN SOLUTION 6.6
        if block_hash in self.cached or self.block_hash[block] is not None:
            return False
        self.cached[block_hash] = block
        self.block_hash[block] = block_hash
        self.block_tokens[block] = tuple(int(t) for t in tokens)
        return True
        # END SOLUTION

    def _uncache(self, block: int) -> None:
        """Forget a block's prefix-cache entry (it is about to hold other tokens)."""
        # BEGIN SOLUTION 6.6
        h = self.block_hash[block]
        if h is not None and self.cached.get(h) == block:
            del self.cached[h]
            self.num_evicted += 1
        self.block_hash[block] = None
        self.block_tokens[block] = None
        # END SOLUTION

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


def hash_block(parent: bytes | None, tokens: Sequence[int]) -> bytes:
    """The prefix-cache key of a full block: a hash chained over (the parent block's hash,
    this block's tokens), so equal keys mean equal WHOLE prefixes, not just equal blocks.
    (16 bytes of BLAKE2b; a hit still compares the block's tokens.)"""
    h = hashlib.blake2b(parent or b"\0", digest_size=16)
    h.update(np.asarray(tokens, dtype=np.int64).tobytes())
    return h.digest()


# ---- 6.2 block tables and the slot mapping -----------------------------------------------

def blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks that hold num_tokens tokens: a new block only when the last one is full."""
    # BEGIN SOLUTION 6.2
    return -(-num_tokens // block_size)
    # END SOLUTION


def slot_mapping(block_tables: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                 block_size: int) -> torch.Tensor:
    """The physical slot of N tokens: token i of sequence rows[i] at positions[i] lives in
    slot `block_tables[rows[i], positions[i] // block_size] * block_size + positions[i] %
    block_size` of the pool seen as (num_blocks * block_size, H, D). Vectorised: one
    gather of the block ids, no Python loop over tokens. rows, positions (N,) int64 ->
    slots (N,) int64."""
    # BEGIN SOLUTION 6.2
    blocks = block_tables[rows, positions // block_size].long()
    return blocks * block_size + positions % block_size
    # END SOLUTION


# ---- 6.3 the paged KV cache ----------------------------------------------------------------

class PagedKVCache(_CacheBase):
    """Stage 04's cache protocol on blocks.

    Per layer a K pool and a V pool, each (num_blocks, block_size, n_head, head_dim): one
    tensor `k` of shape (n_layer, num_blocks, block_size, H, D), and `v` alike. Row b of the
    cache (a sequence slot, as in stage 04: `batch` of them) owns the blocks of its block
    table `tables[b]` (a Python list, the allocator's view) mirrored in `block_tables`
    (batch, max_blocks) int64 on the device, padded with -1 (the kernels' view). Token p
    of row b lives at block `tables[b][p // block_size]`, offset `p % block_size`.

    `lengths[b]` tokens of row b are valid. Blocks are allocated by `reserve` (a new block
    only when the last one is full), freed by `reset`. Data past a row's length is stale
    (it may be another sequence's, or anything): attention never reads it.

    The dimensions, `lengths`, `for_model` and `bytes_per_token` are stage 04's (`_CacheBase`);
    `num_blocks` defaults to the memory of a contiguous cache, batch x max_len tokens.
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, *,
                 num_blocks: int | None = None, block_size: int = 16, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", enable_prefix_caching: bool = True):
        super().__init__(n_layer, batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        if not isinstance(enable_prefix_caching, bool):
            raise TypeError(f"enable_prefix_caching must be a bool, got {enable_prefix_caching!r}")
        if num_blocks is None:
            num_blocks = blocks_needed(batch * max_len, _int_at_least("block_size", block_size, 1))
        self.allocator = BlockAllocator(num_blocks, block_size)
        self.num_blocks, self.block_size = self.allocator.num_blocks, self.allocator.block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.max_blocks = blocks_needed(max_len, self.block_size)  # per sequence
        shape = (n_layer, self.num_blocks, self.block_size, n_head, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=dtype, device=self.device)
        self.tables: list[list[int]] = [[] for _ in range(batch)]
        self.block_tables = torch.full((batch, self.max_blocks), -1, dtype=torch.long, device=self.device)
        self.row_hashes: list[list[bytes]] = [[] for _ in range(batch)]  # hashes of each row's full blocks
        self._slots_for = (None, None, None)  # (rows, positions, slots) of the last write: layers share it

    # -- sizes
    @property
    def nbytes(self) -> int:
        """Bytes of the K and V pools."""
        return self.k.nbytes + self.v.nbytes

    def _row_ids(self, rows) -> list[int]:
        if isinstance(rows, slice):
            return list(range(self.batch))[rows]
        ids = torch.as_tensor(rows, dtype=torch.long).reshape(-1).tolist()
        bad = [r for r in ids if not 0 <= r < self.batch]
        if bad:
            raise ValueError(f"rows {bad} are outside the cache's rows 0..{self.batch - 1}")
        return ids

    def _set_table(self, row: int, blocks: list[int]) -> None:
        self.tables[row] = blocks
        self.block_tables[row].fill_(-1)
        if blocks:
            self.block_tables[row, :len(blocks)] = torch.tensor(blocks, dtype=torch.long)

    # -- the protocol
    def reserve(self, rows, new_lengths: torch.Tensor) -> None:
        """Make room for rows[i] to hold new_lengths[i] tokens: append to each row's block
        table the blocks it lacks (`blocks_needed(new_length) - len(table)`), all
        allocations checked first, so a CacheFullError changes nothing. A row may not
        pass max_len (CacheFullError). Then copy-on-write (6.7): a row about to write into
        a block it shares gets its own copy first (`_copy_on_write`)."""
        row_ids = self._row_ids(rows)
        new = torch.as_tensor(new_lengths).reshape(-1).tolist()
        if len(new) != len(row_ids):
            raise ValueError(f"new_lengths has {len(new)} entries for {len(row_ids)} rows")
        self._slots_for = (None, None, None)
        if new and max(new) > self.max_len:
            raise CacheFullError(f"a row needs {max(new)} positions but the cache holds max_len={self.max_len} "
                                 f"per row (new lengths {new})")
        starts = self.lengths[row_ids].tolist() if row_ids else []
        # BEGIN SOLUTION 6.2
        grow = [max(0, blocks_needed(n, self.block_size) - len(self.tables[r])) for r, n in zip(row_ids, new)]
        cow = self._blocks_to_copy(row_ids, starts, new)
        total = sum(grow) + len(cow)
        if not self.allocator.can_allocate(total):
            raise CacheFullError(f"rows {row_ids} need {total} more KV blocks of {self.block_size} tokens; "
                                 f"{self.allocator.num_free_blocks} of {self.num_blocks} are free")
        for r, g in zip(row_ids, grow):
            if g:
                have = len(self.tables[r])
                blocks = self.allocator.allocate(g)
                self.tables[r].extend(blocks)
                self.block_tables[r, have:have + g] = torch.tensor(blocks, dtype=torch.long)
        # END SOLUTION
        if cow:
            self._copy_on_write(cow)

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None:
        """Store token i's k[i], v[i] (each (H, D)) at row rows[i], position positions[i]:
        one scatter into the pools through `slot_mapping` (computed once per forward: every
        layer writes the same tokens)."""
        last_rows, last_pos, slots = self._slots_for
        # BEGIN SOLUTION 6.3
        if rows is not last_rows or positions is not last_pos:
            slots = slot_mapping(self.block_tables, rows, positions, self.block_size)
            self._slots_for = (rows, positions, slots)
        H, D = self.n_head, self.head_dim
        self.k[layer].view(-1, H, D)[slots] = k
        self.v[layer].view(-1, H, D)[slots] = v
        # END SOLUTION

    def view(self, layer: int, rows, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of `rows`, positions 0..length-1, gathered from the pools into dense
        (B, H, length, D) tensors (a copy, token by token through the slot mapping).
        Positions past a row's length hold whatever their slot holds (the caller masks them)."""
        row_ids = torch.arange(self.batch, device=self.device)[rows] if isinstance(rows, slice) else \
            torch.as_tensor(rows, dtype=torch.long, device=self.device)
        # BEGIN SOLUTION 6.3
        B, L = len(row_ids), length
        pos = torch.arange(L, device=self.device).expand(B, L)
        slots = slot_mapping(self.block_tables, row_ids[:, None].expand(B, L), pos, self.block_size)
        slots = slots.clamp_min(0)  # positions past a row's blocks (table entry -1): masked anyway
        H, D = self.n_head, self.head_dim
        K = self.k[layer].view(-1, H, D)[slots]  # (B, L, H, D)
        V = self.v[layer].view(-1, H, D)[slots]
        return K.transpose(1, 2), V.transpose(1, 2)
        # END SOLUTION

    def attend(self, layer: int, rows, q: torch.Tensor, q_pos: torch.Tensor) -> torch.Tensor:
        """The protocol's optional method: attention of q (B, H, T, D) over rows' cached
        K/V, read through the block tables. Decode on a CUDA device uses the Triton kernel;
        everything else `paged_attention` (PyTorch)."""
        bt = self.block_tables[rows]
        if q.is_cuda and q.shape[2] == 1 and HAS_TRITON and q.dtype in (torch.float16, torch.bfloat16, torch.float32):
            return paged_decode_triton(q, self.k[layer], self.v[layer], bt, q_pos)
        return paged_attention(q, self.k[layer], self.v[layer], bt, q_pos)

    # -- rows: forget, fork, share a prefix
    def reset(self, rows=None) -> None:
        """Forget rows (all if None): their blocks go back to the allocator, lengths to 0."""
        row_ids = list(range(self.batch)) if rows is None else self._row_ids(rows)
        for r in row_ids:
            if self.tables[r]:
                self.allocator.free(self.tables[r])
            self._set_table(r, [])
            self.row_hashes[r] = []
        if row_ids:
            self.lengths[row_ids] = 0
        self._slots_for = (None, None, None)

    def fork_row(self, src: int, dst: int) -> None:
        """Row dst becomes a copy of row src that SHARES its blocks (no K/V is copied):
        the same block table, each block's reference count + 1, the same length. Whichever
        of the two writes into a shared block later copies it first (copy-on-write). dst
        must be empty."""
        (src, dst) = self._row_ids([src, dst])
        if self.tables[dst] or int(self.lengths[dst]):
            raise ValueError(f"fork_row: row {dst} is not empty")
        # BEGIN SOLUTION 6.7
        self.allocator.fork(self.tables[src])
        self._set_table(dst, list(self.tables[src]))
        self.row_hashes[dst] = list(self.row_hashes[src])
        self.lengths[dst] = self.lengths[src]
        # END SOLUTION

    def _blocks_to_copy(self, row_ids: list[int], starts: list[int], new: list[int]) -> list[tuple[int, int]]:
        """(row, table index) of the shared blocks (reference count > 1) that rows will
        write into, positions starts[i]..new[i]-1; only blocks the row already holds."""
        out = []
        bs, refs = self.block_size, self.allocator.ref_counts
        for r, s, n in zip(row_ids, starts, new):
            table = self.tables[r]
            for i in range(s // bs, min(len(table), blocks_needed(n, bs))):
                if refs[table[i]] > 1:
                    out.append((r, i))
        return out

    def _copy_on_write(self, targets: list[tuple[int, int]]) -> None:
        """Give each (row, table index) its own copy of the shared block there: allocate a
        block, copy the K/V of every layer, point the row's table at it, and let go of the
        shared one (its count drops by one)."""
        # BEGIN SOLUTION 6.7
        for r, i in targets:
            old = self.tables[r][i]
            if self.allocator.ref_counts[old] < 2:  # an earlier copy left it to this row alone
                continue
            (new,) = self.allocator.allocate(1)
            self.k[:, new] = self.k[:, old]
            self.v[:, new] = self.v[:, old]
            self.allocator.free([old])
            self.tables[r][i] = new
            self.block_tables[r, i] = new
        # END SOLUTION

    # -- prefix caching (6.6)
    def prefix_hashes(self, tokens: Sequence[int], n_blocks: int | None = None) -> list[bytes]:
        """The chained hashes of the first n_blocks full blocks of `tokens` (default: all)."""
        bs = self.block_size
        n = len(tokens) // bs if n_blocks is None else n_blocks
        out, parent = [], None
        for i in range(n):
            parent = hash_block(parent, tokens[i * bs:(i + 1) * bs])
            out.append(parent)
        return out

    def match_prefix(self, tokens: Sequence[int], hashes: Sequence[bytes] | None = None) -> list[int]:
        """The cached blocks that hold a prefix of `tokens`, longest first match: block i
        is a hit when the prefix cache holds hash i AND that block's stored tokens equal
        tokens[i*bs:(i+1)*bs]; the walk stops at the first miss. Only blocks entirely within
        the first len(tokens) - 1 tokens count: the last token is always computed (its
        logits are the next token's), even when the whole prompt is cached."""
        # BEGIN SOLUTION 6.6
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
        """Start an empty row from the prefix cache: the row takes the matching blocks
        (each `allocator.take`n), its length becomes the number of cached tokens, which is
        returned (0 without prefix caching)."""
        (row,) = self._row_ids([row])
        if self.tables[row] or int(self.lengths[row]):
            raise ValueError(f"assign_prefix: row {row} is not empty")
        if not self.enable_prefix_caching:
            return 0
        # BEGIN SOLUTION 6.6
        hashes = self.prefix_hashes(tokens, (len(tokens) - 1) // self.block_size) if hashes is None else hashes
        blocks = self.match_prefix(tokens, hashes)
        for b in blocks:
            self.allocator.take(b)
        self._set_table(row, blocks)
        self.row_hashes[row] = list(hashes[:len(blocks)])
        self.lengths[row] = len(blocks) * self.block_size
        return len(blocks) * self.block_size
        # END SOLUTION

    def commit(self, row: int, tokens: Sequence[int]) -> None:
        """Enter row's blocks that have become full (lengths[row] // block_size of them)
        into the prefix cache: block i gets hash_block(hash of block i-1, its tokens).
        `tokens` are the row's tokens (at least lengths[row] of them)."""
        if not self.enable_prefix_caching:
            return
        # BEGIN SOLUTION 6.6
        bs, done = self.block_size, self.row_hashes[row]
        n_full = int(self.lengths[row]) // bs
        for i in range(len(done), n_full):
            chunk = tokens[i * bs:(i + 1) * bs]
            h = hash_block(done[-1] if done else None, chunk)
            self.allocator.register(self.tables[row][i], h, chunk)
            done.append(h)
        # END SOLUTION

    def slot_usage(self) -> tuple[int, int]:
        """(slots holding a real token, slots of allocated blocks), each physical block
        counted once however many rows share it."""
        filled: dict[int, int] = {}
        bs = self.block_size
        for r, length in zip(range(self.batch), self.lengths.tolist()):
            for i, b in enumerate(self.tables[r]):
                filled[b] = max(filled.get(b, 0), min(bs, max(0, length - i * bs)))
        return sum(filled.values()), len(filled) * bs

    def __repr__(self) -> str:
        return (f"PagedKVCache(n_layer={self.n_layer}, batch={self.batch}, n_head={self.n_head}, "
                f"head_dim={self.head_dim}, num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"free={self.allocator.num_free_blocks}, dtype={self.dtype})")


# ---- 6.4 paged attention in PyTorch ------------------------------------------------------------

def _check_paged_args(q, k_pool, v_pool, block_tables, q_pos) -> None:
    if not (isinstance(q, torch.Tensor) and q.dim() == 4):
        raise ValueError(f"q must be a (B, H, T, D) tensor, got {getattr(q, 'shape', type(q).__name__)}")
    B, H, T, D = q.shape
    if k_pool.dim() != 4 or k_pool.shape[2:] != (H, D) or v_pool.shape != k_pool.shape:
        raise ValueError(f"k_pool and v_pool must both be (num_blocks, block_size, {H}, {D}), got "
                         f"{tuple(k_pool.shape)} and {tuple(v_pool.shape)}")
    if block_tables.dim() != 2 or block_tables.shape[0] != B:
        raise ValueError(f"block_tables must be ({B}, max_blocks), got {tuple(block_tables.shape)}")
    if q_pos.shape != (B, T):
        raise ValueError(f"q_pos must be ({B}, {T}), got {tuple(q_pos.shape)}")


def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                    q_pos: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """Causal attention of new queries over K/V stored in blocks (prefill, chunked prefill
    and decode alike), in PyTorch.

    q (B, H, T, D): row b's T new queries, already written to the pools with their keys.
    k_pool, v_pool (num_blocks, block_size, H, D): ONE layer's pools.
    block_tables (B, max_blocks) int: row b's physical blocks; entries past its last block
    are ignored (-1 is fine).
    q_pos (B, T) int64: absolute position of each query; query (b, t) attends to keys
    0..q_pos[b, t] of row b (padding queries may have any position whose keys exist).
    Returns y (B, H, T, D) = softmax(q K^T * scale + causal mask) V, scale = D ** -0.5.

    How: gather whole BLOCKS, only as many as the longest row needs (not max_len), one
    `index_select` of contiguous (block_size, H, D) pieces per pool, then one
    `scaled_dot_product_attention` with the causal mask. Keys past a row's last query are
    zeroed after the gather: they may be stale, even NaN, and 0 x NaN is NaN.
    """
    _check_paged_args(q, k_pool, v_pool, block_tables, q_pos)
    # BEGIN SOLUTION 6.4
    B, H, T, D = q.shape
    bs = k_pool.shape[1]
    last = q_pos.max(dim=1).values                            # (B,) last key each row needs
    L = int(last.max()) + 1
    nb = blocks_needed(L, bs)
    bt = block_tables[:, :nb].clamp_min(0).reshape(-1)        # (B * nb,) physical block ids
    K = k_pool.index_select(0, bt).view(B, nb * bs, H, D)[:, :L]   # (B, L, H, D), one copy
    V = v_pool.index_select(0, bt).view(B, nb * bs, H, D)[:, :L]
    keys = torch.arange(L, device=q.device)
    stale = keys > last[:, None]                               # (B, L) past the row's length
    any_stale = bool(stale.any())
    if any_stale:                                              # zero them in place (K, V are copies)
        K.masked_fill_(stale[:, :, None, None], 0)
        V.masked_fill_(stale[:, :, None, None], 0)
    mask, causal = None, False
    if T == 1 and not any_stale:
        pass                                                   # decode, equal lengths: all visible
    elif L == T and bool((q_pos == keys).all()):
        causal = True                                          # fresh prefill of full rows: plain causal
    else:
        mask = (keys <= q_pos[:, :, None])[:, None]            # (B, 1, T, L)
    return F.scaled_dot_product_attention(q, K.transpose(1, 2), V.transpose(1, 2), attn_mask=mask,
                                          is_causal=causal, scale=scale)
    # END SOLUTION


# ---- 6.5 the Triton paged-decode kernel ---------------------------------------------------------

def _paged_decode_kernel(out_ptr, q_ptr, k_ptr, v_ptr, bt_ptr, seq_lens_ptr, scale,
                         stride_qb, stride_qh, stride_kblock, stride_ktok, stride_khead,
                         stride_btb, stride_ob, stride_oh,
                         HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                         BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program per (sequence b, head h): out[b, h] = softmax(q . K^T * scale) V over
    the sequence's seq_lens[b] cached tokens, read block by block through its block table,
    with an online softmax (running max m, running sum l, running weighted sum acc), so
    nothing of size seq_len is ever materialised.

    BLOCK_T, BLOCK_D: powers of two >= BLOCK_SIZE, HEAD_DIM (tl.arange needs powers of two);
    lanes past BLOCK_SIZE / HEAD_DIM are masked. Tokens past seq_len are never loaded
    (their slots may hold stale data, even NaN). Block ids are widened to int64 before
    they are multiplied by the block stride (int32 would overflow in a large pool)."""
    # BEGIN SOLUTION 6.5
    b = tl.program_id(0)
    h = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + b)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    offs_t = tl.arange(0, BLOCK_T)
    t_ok = offs_t < BLOCK_SIZE
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    m = tl.zeros([1], dtype=tl.float32) - float("inf")
    l = tl.zeros([1], dtype=tl.float32)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    n_blocks = tl.cdiv(seq_len, BLOCK_SIZE)
    for i in range(0, n_blocks):
        block = tl.load(bt_ptr + b * stride_btb + i).to(tl.int64)
        ok = t_ok & (i * BLOCK_SIZE + offs_t < seq_len)
        offs = block * stride_kblock + offs_t[:, None] * stride_ktok + h * stride_khead + offs_d[None, :]
        tile_ok = ok[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + offs, mask=tile_ok, other=0.0).to(tl.float32)   # (BLOCK_T, BLOCK_D)
        s = tl.sum(k * q[None, :], axis=1) * scale                          # (BLOCK_T,)
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.where(ok, tl.exp(s - m_new), 0.0)
        v = tl.load(v_ptr + offs, mask=tile_ok, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l = l * alpha + tl.sum(p, axis=0)
        m = m_new
    out = acc / l
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=d_ok)
    # END SOLUTION


_KERNELS: dict[bool, object] = {}


def triton_interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (NumPy on the CPU) in this process.

    That is decided when `triton` is first imported: TRITON_INTERPRET=1 must be in the
    environment then, because `triton.language`'s own helpers (`tl.sum`, `tl.zeros`, ...)
    are built for the interpreter or for the compiler at import time. So tests run the
    kernel on the CPU in a fresh process with that variable set."""
    if not HAS_TRITON:
        return False
    from triton.runtime.jit import JITFunction

    return not isinstance(tl.zeros, JITFunction)


def _kernel():
    """The kernel: compiled for the GPU (`triton.jit`), or interpreted on the CPU."""
    interpret = triton_interpreting()
    if interpret not in _KERNELS:
        if interpret:
            from triton.runtime.interpreter import InterpretedFunction

            _KERNELS[interpret] = InterpretedFunction(_paged_decode_kernel)
        else:  # triton.jit follows TRITON_INTERPRET as it is now: compile whatever it says
            saved = os.environ.pop("TRITON_INTERPRET", None)
            try:
                _KERNELS[interpret] = triton.jit(_paged_decode_kernel)
            finally:
                if saved is not None:
                    os.environ["TRITON_INTERPRET"] = saved
    return _KERNELS[interpret]


def paged_decode_triton(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                        q_pos: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """`paged_attention` for decode (T = 1), as a Triton kernel: the same arguments and
    the same numbers (fp32 accumulation), without gathering K/V into a dense copy.

    q (B, H, 1, D); k_pool, v_pool (num_blocks, block_size, H, D) one layer's pools (the
    same strides); block_tables (B, max_blocks) int; q_pos (B, 1): the query's position,
    so the row's keys are 0..q_pos[b, 0]. Returns (B, H, 1, D) in q's dtype.
    CUDA tensors run the compiled kernel; CPU tensors run in Triton's interpreter, which
    needs TRITON_INTERPRET=1 in the environment before triton is first imported (slow:
    for tests on small shapes). RuntimeError where Triton is missing or cannot run here.
    """
    if not HAS_TRITON:
        raise RuntimeError("paged_decode_triton needs triton (pip install triton; Linux x86-64)")
    if not q.is_cuda and not triton_interpreting():
        raise RuntimeError("paged_decode_triton on CPU tensors needs Triton's interpreter: set "
                           "TRITON_INTERPRET=1 before triton is first imported (e.g. in a fresh process)")
    _check_paged_args(q, k_pool, v_pool, block_tables, q_pos)
    if q.shape[2] != 1:
        raise ValueError(f"paged_decode_triton is for decode: q must have T = 1, got T = {q.shape[2]}")
    if k_pool.stride() != v_pool.stride() or k_pool.stride(-1) != 1:
        raise ValueError("k_pool and v_pool must have the same strides, with a contiguous last dim")
    B, H, _, D = q.shape
    bs = k_pool.shape[1]
    scale = D ** -0.5 if scale is None else float(scale)
    # BEGIN SOLUTION 6.5
    q2 = q[:, :, 0].contiguous()                                     # (B, H, D)
    out = torch.empty_like(q2)
    seq_lens = (q_pos[:, 0] + 1).to(torch.int32).contiguous()
    bt = block_tables.contiguous()
    kernel = _kernel()
    kernel[(B, H)](out, q2, k_pool, v_pool, bt, seq_lens, scale,
                   q2.stride(0), q2.stride(1), k_pool.stride(0), k_pool.stride(1), k_pool.stride(2),
                   bt.stride(0), out.stride(0), out.stride(1),
                   HEAD_DIM=D, BLOCK_SIZE=bs, BLOCK_T=triton.next_power_of_2(bs),
                   BLOCK_D=triton.next_power_of_2(D))
    return out[:, :, None]
    # END SOLUTION


# ---- 6.8 the engine on paged memory ---------------------------------------------------------------

class PagedEngine(Engine):
    """Stage 05's `Engine` on a `PagedKVCache`: same API, same schedulers, same outputs.

    A running request owns a cache row (`request.slot`, a block table) and only the
    blocks its tokens fill. `num_blocks` (default: the memory of stage 05's contiguous
    cache, max_batch_size x max_len tokens) is the memory; the scheduler's
    `max_batch_size` only limits how many rows one step runs.

    The scheduler keeps its policy (FCFS admission, preemption of the latest arrival,
    chunked prefill); the engine is the scheduler's `memory` and answers what memory
    costs, `charge(request)` and `held()`, in tokens but measured in whole blocks:
    a waiting request is charged the blocks its reservation needs (`Scheduler.
    tokens_needed` rounded up to blocks) less the prefix-cache hits on blocks already in
    use; the running ones are charged the blocks they hold (each shared block once) plus
    the blocks they will need to hold all their known tokens (and a copy for a shared
    block they will write). So `fits` admits by free blocks and `preempt` frees the
    victim's blocks (recomputed later, maybe from the prefix cache).

    Statistics, read between steps: `kv_usage()`, `num_preemptions`, `prefix_queries` and
    `prefix_hits` (tokens looked up in / found in the prefix cache, at every admission),
    `request.num_cached_tokens` (prompt tokens a request took from the prefix cache when
    first admitted), `allocator.num_free_blocks` / `num_blocks`, `cache.slot_usage()`.
    `add_forked(request, n)`: parallel sampling on shared blocks.
    """

    def __init__(self, model: GPT, scheduler: Scheduler, *, block_size: int = 16, num_blocks: int | None = None,
                 enable_prefix_caching: bool = True, max_len: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.block_size = _int_at_least("block_size", block_size, 1)
        self._num_blocks = None if num_blocks is None else _int_at_least("num_blocks", num_blocks, 1)
        if not isinstance(enable_prefix_caching, bool):
            raise TypeError(f"enable_prefix_caching must be a bool, got {enable_prefix_caching!r}")
        self.enable_prefix_caching = enable_prefix_caching
        self.num_preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self._forks: dict[str, list[Request]] = {}  # leader id -> siblings waiting for its prefill
        self._hashes: dict[str, list[bytes]] = {}   # request id -> hashes of its prompt's full blocks
        super().__init__(model, scheduler, max_len=max_len, clock=clock)
        self.allocator = self.cache.allocator
        scheduler.memory = self  # the scheduler asks the engine what memory costs: charge / held

    # -- the memory (hooks of stage 05's Engine)
    def _make_cache(self) -> PagedKVCache:
        return PagedKVCache.for_model(self.model, self.scheduler.max_batch_size, max_len=self.max_len,
                                      block_size=self.block_size, num_blocks=self._num_blocks,
                                      enable_prefix_caching=self.enable_prefix_caching)

    def _cache_capacity(self) -> int:
        return self.cache.num_blocks * self.block_size

    def _describe_cache(self) -> str:
        return f"{self.cache.num_blocks} blocks x {self.block_size} tokens"

    def kv_usage(self) -> float:
        """Blocks in use / all blocks (0..1); cached blocks nobody holds count as free."""
        return self.allocator.usage()

    def _prompt_hashes(self, request: Request) -> list[bytes]:
        hashes = self._hashes.get(request.request_id)
        if hashes is None:
            hashes = self.cache.prefix_hashes(request.prompt) if self.enable_prefix_caching else []
            self._hashes[request.request_id] = hashes
        return hashes

    def _hashes_for(self, request: Request) -> list[bytes]:
        """Chained hashes of the full blocks of everything the request knows (prompt +
        output: a preempted request finds its own output blocks again)."""
        if not self.enable_prefix_caching:
            return []
        hashes = self._prompt_hashes(request)
        n = request.num_tokens // self.block_size
        if len(hashes) >= n:
            return hashes
        tokens, bs = request.tokens, self.block_size
        more = list(hashes)
        for i in range(len(hashes), n):
            more.append(hash_block(more[-1] if more else None, tokens[i * bs:(i + 1) * bs]))
        return more

    def _holders(self) -> dict[int, int]:
        """How many rows that will run (the running requests, a fixed batch's dead rows)
        hold each block. The victims of a preemption have left `running` already: their
        blocks are freed before the step runs."""
        counts: dict[int, int] = {}
        for r in (*self.scheduler.running, *self.dead_rows):
            if r.slot is not None:
                for b in self.cache.tables[r.slot]:
                    counts[b] = counts.get(b, 0) + 1
        return counts

    def charge(self, request: Request, holders: dict[int, int] | None = None) -> int:
        """What the scheduler charges a request (`Scheduler.charge` asks its `memory`, this
        engine), in tokens but in WHOLE blocks.

        Its reservation in blocks is `blocks_needed(policy's tokens_needed(request))` (the
        policy's own: every known token for continuous batching, prompt + max_new_tokens
        for static). A request without a row yet is charged all of it, less the
        prefix-cache hits (`cache.match_prefix`) on blocks somebody already holds (ref
        count > 0): those cost no new memory. A request with a row is charged what it
        still lacks: blocks beyond its table, plus one if the block it writes next
        (index num_computed // block_size, if it has pending tokens) is shared with
        another row that will run (`holders[block] > 1`): it will need a copy."""
        # BEGIN SOLUTION 6.8
        bs = self.block_size
        blocks = blocks_needed(self.scheduler.tokens_needed(request), bs)
        if request.slot is None:
            if self.enable_prefix_caching:  # hits on blocks somebody holds cost nothing more
                refs = self.allocator.ref_counts
                blocks -= sum(refs[b] > 0 for b in self.cache.match_prefix(request.tokens, self._hashes_for(request)))
            return blocks * bs
        table = self.cache.tables[request.slot]
        extra = max(0, blocks - len(table))
        i = request.num_computed // bs
        if request.num_pending and i < len(table):
            holders = self._holders() if holders is None else holders
            if holders.get(table[i], 0) > 1:
                extra += 1  # it will write into a block it shares: copy-on-write
        return extra * bs
        # END SOLUTION

    def held(self) -> int:
        """The scheduler's `tokens_held()` (it asks its `memory`): the blocks the rows that will run
        hold (`_holders()`, each block once however many share it), plus what every
        running request is still charged (`charge(r, holders)`), in tokens. The
        scheduler keeps this within `max_cache_tokens` (the pool), admitting by it and
        preempting when it is over."""
        # BEGIN SOLUTION 6.8
        holders = self._holders()
        return (len(holders) * self.block_size
                + sum(self.charge(r, holders) for r in self.scheduler.running))
        # END SOLUTION

    def _acquire(self, request: Request) -> None:
        """A row for the request (stage 05's `_acquire`), started from the prefix cache:
        `cache.assign_prefix(slot, request.tokens, self._hashes_for(request))` gives the
        tokens found there (whole blocks, never the last token), which become
        `num_computed`. With prefix caching on, count the lookup: `prefix_queries` += the
        tokens looked up, `prefix_hits` += those found. On the request's first admission
        (no earlier RUNNING event), `num_cached_tokens` = the prompt tokens found."""
        super()._acquire(request)
        # BEGIN SOLUTION 6.8
        tokens = request.tokens
        cached = self.cache.assign_prefix(request.slot, tokens, self._hashes_for(request))
        request.num_computed = cached
        if self.enable_prefix_caching:
            self.prefix_queries += len(tokens)
            self.prefix_hits += cached
        if not any(e.state is State.RUNNING for e in request.events[:-1]):  # its first admission
            request.num_cached_tokens = min(cached, len(request.prompt))
        # END SOLUTION

    def _forward(self, chunks: list[tuple[Request, int]]) -> tuple[list[Request], torch.Tensor]:
        """Stage 05's step on paged memory, then: blocks that became full enter the prefix
        cache (`commit`), and a forked request that finished its prompt shares it with its
        siblings (`_fork_siblings`)."""
        ready, logits = super()._forward(chunks)
        if self.enable_prefix_caching:
            bs = self.block_size
            for r, _ in chunks:
                if r.num_computed // bs > len(self.cache.row_hashes[r.slot]):
                    self.cache.commit(r.slot, r.tokens)
        if self._forks:
            ready, logits = self._fork_siblings(ready, logits)
        return ready, logits

    def step(self) -> StepOutput:
        out = super().step()
        self.num_preemptions += len(out.preempted)
        return out

    # -- requests
    def add_request(self, request: Request, *, arrival: float | None = None) -> Request:
        """Stage 05's `add_request`; a request that needs more blocks than the whole pool
        (its prompt + max_new_tokens) could never run: ValueError."""
        if isinstance(request, Request):
            need = blocks_needed(len(request.prompt) + request.max_new_tokens, self.block_size)
            if need > self.cache.num_blocks:
                raise ValueError(f"request {request.request_id!r} needs up to {need} KV blocks of "
                                 f"{self.block_size} tokens but the pool has {self.cache.num_blocks}: it could "
                                 f"never run")
        request = super().add_request(request, arrival=arrival)
        request.num_cached_tokens = 0
        return request

    def add_forked(self, request: Request, n: int) -> list[Request]:
        """Parallel sampling: n sequences continue one prompt. They are n requests with ids
        f"{request.request_id}-{i}" (child i samples with seed + i when the request has a
        seed). Only child 0 is queued; when its prompt has run, the others fork from it —
        they share all its blocks (copy-on-write) and sample their first token from the
        same logits — so the prompt is computed and stored once, not n times. A sibling
        that finds no free row then is queued as an ordinary request."""
        if not isinstance(request, Request):
            raise TypeError(f"add_forked expects a Request, got {type(request).__name__}")
        n = _int_at_least("n", n, 1)
        if request.state is not State.WAITING or request.events:
            raise ValueError(f"request {request.request_id!r} was already used ({request.state.value})")
        ids = [f"{request.request_id}-{i}" for i in range(n)]
        taken = [i for i in ids if i in self.requests]
        if taken:
            raise ValueError(f"request ids {taken} are already in this engine")
        children = []
        for i, rid in enumerate(ids):
            sampling = request.sampling
            if sampling.seed is not None:
                sampling = dataclasses.replace(sampling, seed=sampling.seed + i)
            children.append(Request(request.prompt, request.max_new_tokens, sampling=sampling, stop=request.stop,
                                    priority=request.priority, request_id=rid, arrival=request.arrival))
        self.add_request(children[0])
        for child in children[1:]:
            self.add_request(child, arrival=children[0].arrival)
            self.scheduler.remove(child)  # waits for child 0's prefill, outside the queue
        if len(children) > 1:
            self._forks[children[0].request_id] = children[1:]
        return children

    def _fork_siblings(self, ready: list[Request], logits: torch.Tensor) -> tuple[list[Request], torch.Tensor]:
        """Siblings of a leader whose prompt has just run join it. For each sibling: if no
        row is free (`free_slots` empty, or `running` already `max_batch_size` long) queue
        it as an ordinary request (`scheduler.add`); else take a free row, share the
        leader's blocks (`cache.fork_row`), copy its `num_computed` (and
        `num_cached_tokens`), move it to RUNNING at `now`, append it to `scheduler.running`
        and to `ready`, and add the leader's logits row `i` to `rows` — so it samples its
        first token, with its own generator, from the same logits as the leader.
        Returns (ready, logits[rows])."""
        rows = list(range(len(ready)))
        now = self.clock()
        for i, leader in enumerate(list(ready)):
            siblings = self._forks.pop(leader.request_id, None)
            if not siblings:
                continue
            # BEGIN SOLUTION 6.7
            for s in siblings:
                if not self.free_slots or len(self.scheduler.running) >= self.scheduler.max_batch_size:
                    self.scheduler.add(s)  # no row free now: it will compute its prompt itself
                    continue
                s.slot = self.free_slots.pop(0)
                self.cache.fork_row(leader.slot, s.slot)
                s.num_computed = leader.num_computed
                s.num_cached_tokens = getattr(leader, "num_cached_tokens", 0)
                s.transition(State.RUNNING, now)
                self.scheduler.running.append(s)
                ready.append(s)
                rows.append(i)
            # END SOLUTION
        return ready, logits[rows]

    def abort(self, request_id: str) -> bool:
        """Stage 05's `abort`, plus: a sibling still waiting for its leader's prefill is
        dropped from the fork; if the leader is aborted, its siblings are queued on their own."""
        if request_id in self.requests and not self.requests[request_id].finished:
            request = self.requests[request_id]
            for leader_id, siblings in list(self._forks.items()):
                if request in siblings:
                    siblings.remove(request)
            for s in self._forks.pop(request_id, []):
                self.scheduler.add(s)
        return super().abort(request_id)

    def forget(self, request_id: str) -> Request:
        request = super().forget(request_id)
        self._hashes.pop(request_id, None)
        return request


# ---- demo ---------------------------------------------------------------------------------------

@on_one_thread
def demo() -> None:
    """Serve requests sharing a system prompt on paged memory; print utilisation and hits."""
    from solutions.batching import ManualClock, replay
    from solutions.tokenizer import ByteTokenizer
    from solutions.workload import Trace, TraceRequest

    model, what = default_model()
    tok = ByteTokenizer()
    system = tok.encode("# You are a careful Python programmer. Answer with code only.\n")
    tasks = ["def fibonacci(n):\n", "import os\n", "class Stack:\n    def push(self", "def read_lines(path):\n",
             "for i in range(10):\n", "with open(", "def main():\n", "try:\n    import json\n"]
    trace = Trace(tuple(TraceRequest(0.01 * i, tuple(system + tok.encode(t)), 24) for i, t in enumerate(tasks * 2)))
    print(f"model: {what}; 1 torch thread")
    print(f"{len(trace)} requests, each = the same {len(system)}-token system prompt + a task, 24 new tokens\n")
    runs = {}
    for name, make in (("stage 05 contiguous", lambda c: Engine(model, ContinuousBatching(8), clock=c)),
                       ("paged, no prefix cache", lambda c: PagedEngine(model, ContinuousBatching(8), clock=c,
                                                                        enable_prefix_caching=False, num_blocks=48)),
                       ("paged + prefix cache", lambda c: PagedEngine(model, ContinuousBatching(8), clock=c,
                                                                      num_blocks=48))):
        clock = ManualClock()
        engine = make(clock)
        peak = {"usage": 0.0, "filled": 0, "slots": 0, "running": 0}
        inner = engine.step

        def step(engine=engine, inner=inner, peak=peak):
            out = inner()
            if isinstance(engine, PagedEngine):
                filled, slots = engine.cache.slot_usage()
                peak["usage"] = max(peak["usage"], engine.kv_usage())
            else:
                running = engine.scheduler.running
                filled, slots = int(engine.cache.lengths.sum()), len(running) * engine.max_len
            peak["filled"] += filled
            peak["slots"] += slots
            peak["running"] = max(peak["running"], len(engine.scheduler.running))
            return out

        engine.step = step
        t0 = time.perf_counter()
        result = replay(engine, trace, sleep=clock.sleep, step_time=0.01)
        runs[name] = (engine, result, peak, time.perf_counter() - t0)
    base = [r.output for r in runs["stage 05 contiguous"][1].requests]
    contiguous = runs["stage 05 contiguous"][0]
    print(f"KV memory: stage 05 reserves 8 rows x {contiguous.max_len} positions = "
          f"{8 * contiguous.max_len} tokens; the paged engines get 48 blocks x 16 = 768 tokens\n")
    for name, (engine, result, peak, secs) in runs.items():
        util = peak["filled"] / max(1, peak["slots"])
        line = (f"{name:>24}: {secs:5.2f} s, peak running {peak['running']}, "
                f"allocated KV slots holding real tokens {util:4.0%}")
        if isinstance(engine, PagedEngine):
            prefill = sum(s.prefill_tokens for s in engine.steps)
            line += (f"\n{'':>26}peak KV usage {peak['usage']:4.0%} of {engine.allocator.num_blocks} blocks, "
                     f"{engine.num_preemptions} preemptions, prefill tokens computed {prefill}")
            if engine.enable_prefix_caching:
                line += (f", prefix-cache hits {engine.prefix_hits}/{engine.prefix_queries} tokens "
                         f"({engine.prefix_hits / max(1, engine.prefix_queries):.0%})")
        print(line)
    same = all([r.output for r in res.requests] == base for _, res, _, _ in runs.values())
    alone = generate(model, [list(trace.requests[0].prompt)], 24).tokens[0]
    print(f"\nevery engine gave every request the same tokens: {same}; "
          f"request 0 equals stage 04's generate alone: {runs['paged + prefix cache'][1].requests[0].output == alone}")
