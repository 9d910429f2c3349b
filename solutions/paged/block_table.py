"""Block tables (6.2): blocks a sequence needs, the slot of every token, growing a row's table."""

from __future__ import annotations

import torch

from solutions.kv_cache import CacheFullError

from .allocator import BlockAllocator


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` tokens (an int >= 0) of `block_size` (an int >= 1):
    ceil(num_tokens / block_size), a new block only when the last one is full; 0 for 0."""
    # BEGIN SOLUTION 6.2
    # DECISION: the address arithmetic (a position's block is position // block_size, its slot
    #   block_id * block_size + offset, computed for all tokens at once) and reserving all-or-
    #   nothing (every row's growth checked against the free blocks before any is taken).
    # HINT: Integer arithmetic only (no float rounding): -(-a // b) is ceil(a / b).
    return -(-num_tokens // block_size)
    # END SOLUTION


def slot_mapping(block_tables: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                 block_size: int) -> torch.Tensor:
    """The physical slot of N tokens in a pool seen as (num_blocks * block_size, H, D), for
    token i of sequence rows[i] at position positions[i].

    The layout: a sequence's positions fill the blocks of its table row in order,
    block_size tokens a block (entry j of `block_tables[r]` holds positions j * block_size
    up to (j + 1) * block_size - 1 of row r, at offsets 0, 1, ... in its block); in the flat
    pool, block b's offsets 0 .. block_size - 1 are the consecutive slots from b * block_size.
    block_tables (B, max_blocks) int32 or int64; rows, positions (N,) int64 ->
    slots (N,) int64, exact for any block id (an int32 table's ids times block_size can
    pass 2**31). Vectorised: no Python loop over tokens."""
    # BEGIN SOLUTION 6.2
    # HINT: A position's entry in its table row is the position divided by block_size, its
    #   offset in that block the remainder; the slot is the block's first slot plus the offset.
    # HINT: Index the table with two tensors at once, `block_tables[rows, positions // block_size]`,
    #   and widen what it returns (`.long()`) before multiplying by block_size.
    blocks = block_tables[rows, positions // block_size].long()
    return blocks * block_size + positions % block_size
    # END SOLUTION


class BlockTables:
    """The block tables of `PagedKVCache`'s rows; the cache inherits them (state: declared below,
    set by its `__init__`).

    `tables[r]`: row r's physical blocks in logical order (a Python list: the allocator's
    view); `block_tables` (batch, max_blocks) int64 on the device: the same ids, padded with
    -1 (the kernels' view). Both always agree: `_set_table` writes both.
    """

    # The state this part uses, all of it set by `PagedKVCache.__init__` (cache.py) and stage
    # 04's `_CacheBase`: declared here so that a reader sees what the methods below touch. It
    # also calls two methods of fork.py's `CopyOnWrite`: `_blocks_to_copy` and `_copy_on_write`.
    batch: int
    max_len: int
    lengths: torch.Tensor           # (batch,) int64: the valid tokens of each row
    allocator: BlockAllocator       # the pool the rows' blocks come from
    num_blocks: int
    block_size: int
    tables: list[list[int]]         # row r's blocks, in logical order
    block_tables: torch.Tensor      # (batch, max_blocks) int64: the same ids, padded with -1
    row_hashes: list[list[bytes]]   # prefix.py's committed keys: `reset` clears a row's
    _slots_for: tuple               # `write`'s memoised (rows, positions, slots): stale once a table changes

    def reserve(self, rows, new_lengths: torch.Tensor) -> None:
        """Make room for rows[i] to hold new_lengths[i] tokens (stage 04's protocol; the
        caller advances `lengths` after writing). Afterwards row r = rows[i] holds
        max(its blocks before, `blocks_needed(new_lengths[i], block_size)`) blocks (a table
        never shrinks): its old blocks, then the ones it lacked, newly allocated from
        `allocator`, in both `tables[r]` and `block_tables[r]`.

        All or nothing: if the free blocks cannot cover every row's growth PLUS one block per
        entry of `cow` (the shared blocks these rows will write, each to be copied: given,
        above the hole), raise CacheFullError before allocating anything. Checked before
        (given): the rows exist, one length per row, none past max_len (CacheFullError).
        After (given): the copies, `_copy_on_write(cow)` (6.7)."""
        row_ids, new, starts = self._reserve_args(rows, new_lengths)
        cow = self._blocks_to_copy(row_ids, starts, new)  # [(row, table index)] to copy-on-write (fork.py)
        # BEGIN SOLUTION 6.2
        # HINT: Compute every row's growth first and check the total against
        #   `allocator.can_allocate`; only then allocate row by row.
        # HINT: Write the new ids into `block_tables[r, have:have + g]` as an int64 tensor.
        grow = [max(0, blocks_needed(n, self.block_size) - len(self.tables[r])) for r, n in zip(row_ids, new)]
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

    # -- given
    def _reserve_args(self, rows, new_lengths) -> tuple[list[int], list[int], list[int]]:
        """(row ids, new lengths, current lengths) of a `reserve` call, checked."""
        row_ids = self._row_ids(rows)
        new = torch.as_tensor(new_lengths).reshape(-1).tolist()
        if len(new) != len(row_ids):
            raise ValueError(f"new_lengths has {len(new)} entries for {len(row_ids)} rows")
        self._slots_for = (None, None, None)  # the tables change: `write`'s memoised slots are stale
        if new and max(new) > self.max_len:
            raise CacheFullError(f"a row needs {max(new)} positions but the cache holds max_len={self.max_len} "
                                 f"per row (new lengths {new})")
        return row_ids, new, (self.lengths[row_ids].tolist() if row_ids else [])

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
