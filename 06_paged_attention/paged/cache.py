# GENERATED from solutions/paged/cache.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 06_paged_attention/06_paged_attention.ipynb. Exercises in this file (line of each hole, then the commands):
#   6.3 PagedKVCache: scatter and gather through blocks: lines 40, 51; `course check 6.3`, `course hint 6.3`
"""The paged KV cache (6.3): per-layer K/V pools of blocks, behind stage 04's cache protocol."""

from __future__ import annotations

import torch

from solutions.checks import check_int
from solutions.kv_cache import _CacheBase

from .allocator import BlockAllocator
from .attention import paged_attention
from .block_table import BlockTables, blocks_needed, slot_mapping
from .decode_staging import DecodeStaging
from .fork import CopyOnWrite
from .prefix import PrefixSharing
from .triton_decode import HAS_TRITON, paged_decode_triton


class PagedKVCache(BlockTables, PrefixSharing, CopyOnWrite, _CacheBase):
    """Stage 04's cache protocol on blocks (state: `__init__`, below the exercises).

    `k`, `v`: (n_layer, num_blocks, block_size, n_head, head_dim) pools, laid out as 6.2's
    `slot_mapping` says. `lengths[b]` tokens of row b are valid; slots past them are stale
    (anything, NaN too): never read. Inherited: `reserve`, `reset` (block_table.py), prefix
    caching (prefix.py), fork (fork.py)."""

    def write(self, layer: int, rows: torch.Tensor, positions: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor) -> None:
        """Store token i's k[i], v[i] (each (H, D)) at row rows[i], position positions[i]
        (rows, positions (N,) int64, reserved already): afterwards they are in `self.k[layer]`
        and `self.v[layer]` seen as (num_blocks * block_size, H, D) at `slot_mapping`'s slots
        (in the pools themselves, no Python loop over tokens); `_slots_for` == (rows,
        positions, slots). Every layer of one forward passes the SAME `rows` and `positions`
        objects: when both are (`is`) those in `_slots_for`, its slots are reused, not
        recomputed (`reserve` and `reset` clear it). Changes nothing else (not `lengths`)."""
        last_rows, last_pos, slots = self._slots_for
        raise NotImplementedError('Exercise 6.3: PagedKVCache: scatter and gather through blocks — see 06_paged_attention.ipynb')

    def view(self, layer: int, rows, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of `rows` (a slice, or row ids) at positions 0..length-1 of `layer`, as dense
        (B, H, length, D) tensors in the pools' dtype: a gather (a copy, sharing no memory
        with the pools), token by token through the slot mapping. Positions past a row's
        length hold whatever their slot holds, and positions past its blocks (table entry -1)
        some slot's data, read through a valid slot (a -1 entry's slot would be negative):
        the caller masks them. Changes nothing."""
        row_ids = torch.arange(self.batch, device=self.device)[rows] if isinstance(rows, slice) else \
            torch.as_tensor(rows, dtype=torch.long, device=self.device)
        raise NotImplementedError('Exercise 6.3: PagedKVCache: scatter and gather through blocks — see 06_paged_attention.ipynb')

    # -- given: the state, attention through the tables, sizes
    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, *,
                 num_blocks: int | None = None, block_size: int = 16, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", enable_prefix_caching: bool = True):
        """`num_blocks` defaults to the memory of a contiguous cache, batch x max_len tokens."""
        super().__init__(n_layer, batch, n_head, max_len, head_dim, dtype=dtype, device=device)
        if not isinstance(enable_prefix_caching, bool):
            raise TypeError(f"enable_prefix_caching must be a bool, got {enable_prefix_caching!r}")
        if num_blocks is None:
            num_blocks = blocks_needed(batch * max_len, check_int("block_size", block_size, 1))
        self.allocator = BlockAllocator(num_blocks, block_size)
        self.num_blocks, self.block_size = self.allocator.num_blocks, self.allocator.block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.max_blocks = blocks_needed(max_len, self.block_size)  # per sequence
        shape = (n_layer, self.num_blocks, self.block_size, n_head, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=dtype, device=self.device)
        self.tables: list[list[int]] = [[] for _ in range(batch)]
        self.block_tables = torch.full((batch, self.max_blocks), -1, dtype=torch.long, device=self.device)
        self.row_hashes: list[list[bytes]] = [[] for _ in range(batch)]  # keys of each row's committed blocks
        self._slots_for = (None, None, None)  # (rows, positions, slots) of the last write: layers share it
        self._groups_for = (None, None)       # (q_pos, its length groups) of the last attend
        self.staging = DecodeStaging()        # decode rows' K/V kept dense between steps

    def reset(self, rows=None) -> None:
        """`BlockTables.reset`; the decode copies go too."""
        self.staging.clear()
        super().reset(rows)

    @property
    def nbytes(self) -> int:
        """Bytes of the K and V pools."""
        return self.k.nbytes + self.v.nbytes

    def attend(self, layer: int, rows, q: torch.Tensor, q_pos: torch.Tensor) -> torch.Tensor:
        """The protocol's optional method: attention of q (B, H, T, D) over rows' cached
        K/V, read through the block tables. Decode on a CUDA device uses the Triton kernel;
        a run of decode steps over the same rows, the copy `staging` keeps (decode_staging.py);
        everything else `paged_attention` (PyTorch)."""
        bt = self.block_tables[rows]
        if q.is_cuda and q.shape[2] == 1 and HAS_TRITON and q.dtype in (torch.float16, torch.bfloat16, torch.float32):
            return paged_decode_triton(q, self.k[layer], self.v[layer], bt, q_pos)
        groups = self._length_groups(q_pos)
        if q.shape[2] == 1 and groups is None:
            y = self.staging.attend(self, layer, rows, q, q_pos, bt)
            if y is not None:
                return y
        if groups is None:
            return paged_attention(q, self.k[layer], self.v[layer], bt, q_pos)
        y = torch.empty_like(q)
        for idx in groups:
            y[idx] = paged_attention(q[idx], self.k[layer], self.v[layer], bt[idx], q_pos[idx])
        return y

    #: Padded key blocks one `paged_attention` call may gather before rows of very different
    #: lengths are split into calls of their own (a call gathers every row to its longest).
    PAD_BLOCKS = 32

    def _length_groups(self, q_pos: torch.Tensor) -> list[torch.Tensor] | None:
        """Rows of one forward split by length, so that a short row is not gathered to a long
        one's blocks: index tensors, longest rows first; None when one call wastes little.
        Every layer of a forward passes the same `q_pos` object: computed once per forward."""
        if self._groups_for[0] is q_pos:
            return self._groups_for[1]
        last = q_pos.max(dim=1).values.tolist()  # each row's last position
        bs = self.block_size
        order = sorted(range(len(last)), key=lambda b: -last[b])
        groups: list[list[int]] = [[]]
        widest, waste = 0, 0
        for b in order:
            nb = last[b] // bs + 1
            if groups[-1] and waste + widest - nb > self.PAD_BLOCKS:
                groups.append([])
            if not groups[-1]:
                widest, waste = nb, 0
            waste += widest - nb
            groups[-1].append(b)
        out = None if len(groups) == 1 else [torch.tensor(g, device=q_pos.device) for g in groups]
        self._groups_for = (q_pos, out)
        return out

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
