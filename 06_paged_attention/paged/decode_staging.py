# GENERATED from solutions/paged/decode_staging.py by `course stubs --write`.
# Nothing to write here: given code of stage 06 (06_paged_attention/06_paged_attention.ipynb).
"""The decode rows' keys and values kept dense between steps (given): a step copies one new
token per row out of the blocks, instead of every row's whole context."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class DecodeStaging:
    """Dense copies of a decode batch's K/V, one per layer, that live from step to step.

    `paged_attention` (6.4) copies every row's blocks into a dense (B, L, H, D) tensor on
    every call, because `scaled_dot_product_attention` reads dense tensors only. In a decode
    step that copy is the most expensive thing the CPU does: more than the attention that
    reads it (07_serving/bench_batch.py's "staging" rows measure both). Yet when consecutive
    steps decode the same rows, all of it but the newest token per row is the copy the last
    step made. So a run of such steps keeps its copy and appends to it. A kernel that
    reads the blocks in place (6.5's Triton kernel on a GPU, vLLM's C++ one on the CPU)
    needs no copy at all.

    `attend` serves a decode call (q (B, H, 1, D)) or returns None, and the cache's own path
    runs as before. A decode run is a sequence of this layer's decode calls over the same
    rows, every position one past the call before. Any row that starts, ends, is preempted
    or forked ends the run, since that row is in one call and not the next; a reset (a row
    retired or preempted) drops every copy. The first `MIN_RUN` calls of a run take the
    cache's path; the next one makes the copy, `HEADROOM_BLOCKS` blocks longer than the
    longest row. Later calls append one token per row until a row outgrows the copy, and
    then it is made again. The copies hold at most the pools' own bytes (`cache.nbytes`);
    past that, nothing is staged.

    What it relies on is the paged cache's own invariant: a running row's tokens are
    written once, at its length, and never rewritten in place; its blocks change only by
    growing, by a copy-on-write (the same contents) or through a reset. Positions past a
    row's length are zero in the copy, so stale slots (NaN included) are never read.
    `steps_staged`, `builds`: decode calls it served, copies it made.
    """

    #: Room past the longest row when a copy is made, in blocks: the copy serves about this
    #: many blocks' worth of steps before a row outgrows it.
    HEADROOM_BLOCKS = 4
    #: Calls a run must have continued before its copy is made: a run that ends sooner
    #: would pay the copy and never get it back.
    MIN_RUN = 3

    def __init__(self) -> None:
        self._last: dict[int, tuple] = {}   # layer -> (rows, positions, run) of its last decode call
        self._copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # layer -> dense K, V (B, cap, H, D)
        self._memory: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # layer -> flat storage of its copies
        self.steps_staged = 0
        self.builds = 0

    def clear(self) -> None:
        """End every run (the cache was reset). The copies' memory stays for the next ones:
        a fresh allocation of megabytes costs the first touch of every page."""
        self._last.clear()
        self._copies.clear()

    def attend(self, cache, layer: int, rows, q: torch.Tensor, q_pos: torch.Tensor,
               block_tables: torch.Tensor) -> torch.Tensor | None:
        """Decode attention of q (B, H, 1, D) over `rows`' cached K/V from this layer's copy,
        or None when this call does not continue a decode run (the caller's path runs then).
        The cache asks only for decode calls it does not split by length: a call it skips
        leaves a gap in the positions, which ends the run."""
        B, _, _, D = q.shape
        H = cache.n_head  # the pools' K/V heads (fewer than q's on a Llama: grouped-query attention)
        ids = range(cache.batch)[rows] if isinstance(rows, slice) else tuple(torch.as_tensor(rows).tolist())
        pos = q_pos[:, 0]
        bs = cache.block_size
        L = int(pos.max()) + 1
        last = self._last.get(layer)
        run = last[2] + 1 if last is not None and last[0] == ids and torch.equal(last[1] + 1, pos) else 0
        self._last[layer] = (ids, pos.clone(), run)  # run: calls in a row this run has continued
        if run < self.MIN_RUN:
            self._copies.pop(layer, None)
            return None
        copy = self._copies.get(layer)
        if copy is not None and copy[0].shape[1] >= L:
            K, V = copy
            rows_b = torch.arange(B, device=q.device)
            slots = block_tables.gather(1, (pos // bs)[:, None])[:, 0] * bs + pos % bs
            K[rows_b, pos] = cache.k[layer].view(-1, H, D)[slots]
            V[rows_b, pos] = cache.v[layer].view(-1, H, D)[slots]
        else:
            cap = min(cache.max_blocks, -(-L // bs) + self.HEADROOM_BLOCKS) * bs
            if 2 * B * cap * H * D * cache.k.element_size() * cache.n_layer > cache.nbytes:
                return None  # the copies would outgrow the pools: not worth the memory
            K, V = self._make_copy(cache, layer, block_tables, pos, cap)
            self._copies[layer] = (K, V)
            self.builds += 1
        self.steps_staged += 1
        mask = None
        if int(pos.min()) != L - 1:  # rows of different lengths: each sees its own keys only
            mask = (torch.arange(L, device=q.device) <= pos[:, None])[:, None, None, :]
        return F.scaled_dot_product_attention(q, K[:, :L].transpose(1, 2), V[:, :L].transpose(1, 2), attn_mask=mask,
                                              enable_gqa=H != q.shape[1])

    def _make_copy(self, cache, layer: int, block_tables: torch.Tensor, pos: torch.Tensor,
                   cap: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense (B, cap, H, D) K and V of the rows' positions 0..pos[b]; zeros past them.
        One `index_select` per pool straight into the layer's memory (grown when too small);
        blocks past a row's table (-1) read block 0, and every stale position is zeroed: the
        copy's room past the longest row as a slice, shorter rows' tails by index."""
        B, bs, H, D = len(pos), cache.block_size, cache.n_head, cache.head_dim
        L = int(pos.max()) + 1
        ids = block_tables[:, :cap // bs].clamp_min(0).reshape(-1)
        stale = (torch.arange(L, device=pos.device) > pos[:, None]).nonzero(as_tuple=True)  # shorter rows' tails
        n = B * cap * H * D
        memory = self._memory.get(layer)
        if memory is None or memory[0].numel() < n:
            memory = tuple(cache.k.new_empty(n) for _ in range(2))
            self._memory[layer] = memory
        out = []
        for pool, flat in zip((cache.k[layer], cache.v[layer]), memory):
            X = torch.index_select(pool, 0, ids, out=flat[:n].view(len(ids), bs, H, D)).view(B, cap, H, D)
            X[:, L:] = 0  # NaN too: written, not multiplied
            X[stale] = 0
            out.append(X)
        return out[0], out[1]
