# GENERATED from solutions/paged/__init__.py by `course stubs --write`.
# Nothing to write here: given code of stage 06 (06_paged_attention/06_paged_attention.ipynb).
"""Stage 06: paged attention — KV memory in fixed-size blocks, shared prefixes, copy-on-write.

The files, in exercise order (the lesson is 06_paged_attention.ipynb):

    allocator.py      BlockAllocator: the pool, its free queue, reference counts       6.1
    block_table.py    blocks_needed, slot_mapping, growing a row's table (reserve)     6.2
    cache.py          PagedKVCache: per-layer K/V pools, write / view                  6.3
    decode_staging.py DecodeStaging: decode rows' K/V kept dense between steps         given
    attention.py      paged_attention: attention through the block tables (PyTorch)    6.4
    triton_decode.py  paged_decode_triton: the same for decode, a Triton kernel        6.5
    prefix.py         hash_block, the allocator's prefix index, rows started from it   6.6
    fork.py           fork_row, copy-on-write; parallel sampling (_fork_siblings, 6.8) 6.7
    block_manager.py  BlockManager: what requests cost the scheduler, in blocks        6.8
    engine.py         PagedEngine: stage 05's engine on paged memory                   given
    demo.py           demo()                                                           given
    triton_split_decode.py  going further: paged_decode_split, split-K decode          6.9
"""

from solutions.kv_cache import CacheFullError

from .allocator import BlockAllocator
from .attention import paged_attention
from .block_manager import BlockManager
from .block_table import BlockTables, blocks_needed, slot_mapping
from .cache import PagedKVCache
from .decode_staging import DecodeStaging
from .demo import demo
from .engine import PagedEngine
from .fork import CopyOnWrite, ParallelSampling
from .prefix import PrefixIndex, PrefixSharing, hash_block
from .triton_decode import HAS_TRITON, paged_decode_triton, triton_interpreting
from .triton_split_decode import SplitPlan, paged_decode_split, split_plan

__all__ = [
    "CacheFullError", "BlockAllocator", "blocks_needed", "slot_mapping", "PagedKVCache", "DecodeStaging",
    "paged_attention",
    "paged_decode_triton", "HAS_TRITON", "triton_interpreting", "hash_block", "BlockManager", "PagedEngine", "demo",
    "paged_decode_split", "split_plan", "SplitPlan",
]
