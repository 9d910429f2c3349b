# GENERATED from solutions/paged/block_manager.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 06_paged_attention/06_paged_attention.ipynb. Exercises in this file (line of each hole, then the commands):
#   6.8 The engine on paged memory: block manager, parallel sampling: lines 32, 50, 70; `course check 6.8`, `course hint 6.8`
"""The engine's block manager (6.8): what requests cost the scheduler in whole blocks; admission
from the prefix cache."""

from __future__ import annotations

from solutions.batching import Request, Scheduler, State

from .block_table import blocks_needed
from .cache import PagedKVCache
from .prefix import hash_block


class BlockManager:
    """The paged engine's memory, as its scheduler sees it (`scheduler.memory`; state: `__init__`).

    Stage 05's Scheduler asks `memory.charge(request)` and `memory.held()` (cache tokens)
    and keeps held() within `max_cache_tokens` (the pool: num_blocks x block_size),
    admitting by it and preempting when it is over. Both are counted in WHOLE blocks.
    The rows that will run: `scheduler.running` and the engine's `dead_rows` (a fixed
    batch's finished rows); a request being preempted has already left `running`.
    Statistics: `prefix_queries`, `prefix_hits` (tokens, counted by `admit`).
    """

    def held(self) -> int:
        """Cache tokens held, a multiple of block_size: every distinct block the rows that
        will run hold (`holders()` lists them; a block several rows share counts ONCE), plus
        what each request of `scheduler.running` is still charged (`charge`). Changes
        nothing."""
        raise NotImplementedError('Exercise 6.8: The engine on paged memory: block manager, parallel sampling — see 06_paged_attention.ipynb')

    def charge(self, request: Request, holders: dict[int, int] | None = None) -> int:
        """Cache tokens admitting or keeping `request` costs now, a multiple of block_size.

        need = blocks_needed(scheduler.tokens_needed(request), block_size): the policy's
        own reservation (every known token for continuous batching, prompt +
        max_new_tokens for static) in whole blocks.
        - No row yet (`request.slot is None`): `need` blocks less, with prefix caching on,
          the blocks of `cache.match_prefix(request.tokens, hashes_for(request))` that
          somebody holds now (reference count > 0): those cost no new memory (a hit on a
          FREE cached block still costs its block: it leaves the free queue).
        - A row: what it still lacks, max(0, need - len(its table)) blocks, plus ONE if it
          has pending tokens and the block its next token (position num_computed) goes into,
          when its table already has that block, is held by more than one row that will run
          (`holders[block] > 1`; holders: `holders()` when None): copy-on-write will need a
          block for its copy.
        Changes nothing."""
        raise NotImplementedError('Exercise 6.8: The engine on paged memory: block manager, parallel sampling — see 06_paged_attention.ipynb')

    def admit(self, request: Request) -> int:
        """Start an admitted request's row from the prefix cache; return the tokens found.

        Called by the engine's `_acquire`, once stage 05 gave the request an empty row
        (`request.slot`, num_computed 0) and after the scheduler recorded this admission:
        the LAST entry of `request.events` is its RUNNING event.
        Returns cached: the tokens at the start of `request.tokens` that the prefix cache
        holds (whole blocks, never the last token; 0 with prefix caching off), the request's
        keys being `hashes_for(request)`. Afterwards:
        - the row is started from those blocks as 6.6 starts a row from the prefix cache,
          and `request.num_computed == cached`;
        - prefix caching on: `prefix_queries` has grown by `request.num_tokens` (every token
          it knows at this admission, prompt + output so far, the last token too, which can
          never hit) and `prefix_hits` by cached; off: neither changed. Every admission
          counts, a return after preemption included;
        - at its FIRST admission (no RUNNING event in `request.events[:-1]`)
          `request.num_cached_tokens == min(cached, len(request.prompt))`; a later admission
          leaves it as it was."""
        raise NotImplementedError('Exercise 6.8: The engine on paged memory: block manager, parallel sampling — see 06_paged_attention.ipynb')

    # -- given: the state, who holds what, the requests' block keys
    def __init__(self, cache: PagedKVCache, scheduler: Scheduler, dead_rows: list[Request]):
        self.cache = cache
        self.scheduler = scheduler
        self.dead_rows = dead_rows  # the engine's own list (it changes in place)
        self.block_size = cache.block_size
        self.enable_prefix_caching = cache.enable_prefix_caching
        self.prefix_queries = 0  # tokens looked up in the prefix cache, at every admission
        self.prefix_hits = 0     # tokens found there
        self._hashes: dict[str, list[bytes]] = {}  # request id -> keys of its prompt's full blocks

    def holders(self) -> dict[int, int]:
        """block id -> how many rows that will run hold it (blocks nobody of them holds: absent)."""
        counts: dict[int, int] = {}
        for r in (*self.scheduler.running, *self.dead_rows):
            if r.slot is not None:
                for b in self.cache.tables[r.slot]:
                    counts[b] = counts.get(b, 0) + 1
        return counts

    def hashes_for(self, request: Request) -> list[bytes]:
        """The chained keys of the full blocks of everything the request knows (prompt +
        output: a preempted request finds its own output blocks again); [] with prefix
        caching off. The prompt's are computed once per request and kept until `forget`."""
        if not self.enable_prefix_caching:
            return []
        hashes = self._hashes.get(request.request_id)
        if hashes is None:
            hashes = self._hashes[request.request_id] = self.cache.prefix_hashes(request.prompt)
        n = request.num_tokens // self.block_size
        if len(hashes) >= n:
            return hashes
        tokens, bs, more = request.tokens, self.block_size, list(hashes)
        for i in range(len(hashes), n):
            more.append(hash_block(more[-1] if more else None, tokens[i * bs:(i + 1) * bs]))
        return more

    def forget(self, request_id: str) -> None:
        """Drop a request's kept keys (the engine forgets the request)."""
        self._hashes.pop(request_id, None)
