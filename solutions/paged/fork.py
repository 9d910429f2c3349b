"""Fork and copy-on-write (6.7): rows that share blocks, copied when one writes; parallel sampling (6.8)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from solutions.batching import Request, Scheduler, State
from solutions.checks import check_int

from .allocator import BlockAllocator
from .block_table import blocks_needed


class CopyOnWrite:
    """Forked rows of `PagedKVCache`; the cache inherits it. A block held by more than one
    table (reference count > 1) is read by all of them and written by none: a row about to
    write into it first gets its own copy (`reserve` calls `_copy_on_write`)."""

    def fork_row(self, src: int, dst: int) -> None:
        """Row dst becomes a copy of row src that SHARES its blocks (no K/V is copied): the
        same block table (both views), each block one more holder, the same committed keys
        (`row_hashes`) and length; dst's lists are its own, not src's (a row that grows
        later must not grow the other). Rows outside the cache, or a dst that is not empty
        (blocks or length): ValueError, nothing changed."""
        (src, dst) = self._row_ids([src, dst])
        if self.tables[dst] or int(self.lengths[dst]):
            raise ValueError(f"fork_row: row {dst} is not empty")
        # BEGIN SOLUTION 6.7
        # DECISION: what a fork shares and what it copies (blocks shared by count, table and keys
        #   copied as lists), and when a write must copy first (the block it writes into has more
        #   than one holder).
        # HINT: Four things become src's: the counts go up (`allocator.fork`), the table (a new
        #   list: `_set_table`), the committed keys (a copy of the list) and the length.
        self.allocator.fork(self.tables[src])
        self._set_table(dst, list(self.tables[src]))
        self.row_hashes[dst] = list(self.row_hashes[src])
        self.lengths[dst] = self.lengths[src]
        # END SOLUTION

    def _copy_on_write(self, targets: list[tuple[int, int]]) -> None:
        """Give the rows of `targets`, (row, table index i) pairs, their own copies of the
        shared blocks they will write. Afterwards, taken in `targets` order, each entry whose
        block was still shared (count > 1) when its turn came holds at index i of its table
        (both views) a block of its own, newly allocated, whose K and V equal the shared
        block's in every layer; the shared block has one holder less. An entry whose block is
        no longer shared (count 1: an earlier copy left it to this row) keeps it. Nothing
        else changes. `reserve` checked that enough blocks are free."""
        # BEGIN SOLUTION 6.7
        # HINT: Per entry whose block is still shared: allocate one block, copy K and V into
        #   it (`self.k[:, new] = self.k[:, old]` copies one block in every layer at once),
        #   free the old one and point `tables[r][i]` and `block_tables[r, i]` at the new.
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

    # -- given
    # The state this part uses, all of it set by `PagedKVCache.__init__` (cache.py) and stage
    # 04's `_CacheBase`: declared here so that a reader sees what the methods above touch. It
    # also calls two methods of block_table.py's `BlockTables`: `_row_ids` and `_set_table`.
    lengths: torch.Tensor           # (batch,) int64: the valid tokens of each row
    allocator: BlockAllocator       # the pool: reference counts, fork, allocate, free
    block_size: int
    k: torch.Tensor                 # (n_layer, num_blocks, block_size, n_head, head_dim) pools
    v: torch.Tensor
    tables: list[list[int]]         # row r's blocks, in logical order (block_table.py)
    block_tables: torch.Tensor      # (batch, max_blocks) int64: the same ids, padded with -1
    row_hashes: list[list[bytes]]   # row r's committed keys (prefix.py)

    def _blocks_to_copy(self, row_ids: list[int], starts: list[int], new: list[int]) -> list[tuple[int, int]]:
        """(row, table index) of the shared blocks (reference count > 1) that rows will
        write into, positions starts[i]..new[i]-1; only blocks the row already holds (given)."""
        out = []
        bs, refs = self.block_size, self.allocator.ref_counts
        for r, s, n in zip(row_ids, starts, new):
            table = self.tables[r]
            for i in range(s // bs, min(len(table), blocks_needed(n, bs))):
                if refs[table[i]] > 1:
                    out.append((r, i))
        return out


class ParallelSampling:
    """n answers to one prompt on shared blocks; `PagedEngine` inherits it (engine.py), whose
    `_forks` maps a leader's id to the siblings waiting for its prompt to run."""

    # The state this part uses, set by `PagedEngine.__init__` (engine.py) and stage 05's
    # `Engine.__init__`: declared here so that a reader sees what the methods below touch. It
    # also calls the engine's `add_request` and, through `super()`, stage 05's `abort`.
    _forks: dict[str, list[Request]]  # leader id -> siblings waiting for its prefill
    requests: dict[str, Request]
    scheduler: Scheduler
    free_slots: list[int]             # the cache rows nobody holds, in order
    cache: CopyOnWrite                # the engine's PagedKVCache: here only its `fork_row` is used
    clock: Callable[[], float]

    def _fork_siblings(self, ready: list[Request], logits: torch.Tensor) -> tuple[list[Request], torch.Tensor]:
        """Siblings of a leader whose prompt has just run join it; returns (ready, logits[rows]).

        `ready`, `logits` (len(ready), V): the step's requests that sample now, and their
        logits (row k for ready[k]). A ready leader's siblings leave `_forks` (its entry is
        removed). Afterwards each of them either runs or waits:
        - a row is free for it (`free_slots` not empty and `scheduler.running` shorter than
          `max_batch_size`): it is RUNNING (at `self.clock()`), in `scheduler.running` and in
          the returned ready, in that row (`slot`; it left `free_slots`), a fork of the
          leader's row (6.7: its blocks shared, no K/V copied), with the leader's `num_computed` and
          `num_cached_tokens`; its logits row is a copy of the leader's, so it samples its
          first token, with its own generator, from the same logits;
        - no row is free: it waits in the scheduler's waiting queue, at its place by
          `Request.order` like an ordinary request, and computes its prompt itself later.
        Siblings take free rows in order (leaders in `ready` order, each one's siblings in
        `_forks` order), each the first free row. Returned ready: the given requests, then
        the siblings that joined, in that order; returned logits row k is ready[k]'s.
        Joining is not an admission: `prefix_queries` and `prefix_hits` do not change."""
        rows = list(range(len(ready)))
        now = self.clock()
        for i, leader in enumerate(list(ready)):
            siblings = self._forks.pop(leader.request_id, None)
            if not siblings:
                continue
            # BEGIN SOLUTION 6.8
            # DECISION: what the scheduler is charged (blocks actually held, shared ones once), and
            #   how siblings join a leader (each needs a free row; those that find none wait in the
            #   queue like any request).
            # HINT: Check for a free row for each sibling in turn: the first ones may take the
            #   last free rows, the others wait in the queue like any request.
            # HINT: A sibling that joins takes `self.free_slots.pop(0)` as its slot, gets
            #   `cache.fork_row(leader.slot, s.slot)`, the leader's two counts, the RUNNING move
            #   at `now` and a place in `scheduler.running` and `ready`; append `i` to `rows`
            #   for it, so `logits[rows]` lines up with `ready`. One that waits: `scheduler.add(s)`.
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

    # -- given
    def add_forked(self, request: Request, n: int) -> list[Request]:
        """Parallel sampling: n sequences continue one prompt. They are n requests with ids
        f"{request.request_id}-{i}" (child i samples with seed + i when the request has a
        seed). Only child 0 is queued; when its prompt has run, the others fork from it —
        they share all its blocks (copy-on-write) and sample their first token from the
        same logits — so the prompt is computed and stored once, not n times. A sibling
        that finds no free row then is queued as an ordinary request."""
        if not isinstance(request, Request):
            raise TypeError(f"add_forked expects a Request, got {type(request).__name__}")
        n = check_int("n", n, 1)
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
                                    priority=request.priority, request_id=rid, arrival=request.arrival,
                                    client=request.client))
        self.add_request(children[0])
        for child in children[1:]:
            self.add_request(child, arrival=children[0].arrival)
            self.scheduler.remove(child)  # waits for child 0's prefill, outside the queue
        if len(children) > 1:
            self._forks[children[0].request_id] = children[1:]
        return children

    def abort(self, request_id: str) -> bool:
        """Stage 05's `abort`, plus: a sibling still waiting for its leader's prefill is
        dropped from the fork; if the leader is aborted, its siblings are queued on their own."""
        if request_id in self.requests and not self.requests[request_id].finished:
            request = self.requests[request_id]
            for siblings in self._forks.values():
                if request in siblings:
                    siblings.remove(request)
            for s in self._forks.pop(request_id, []):
                self.scheduler.add(s)
        return super().abort(request_id)
