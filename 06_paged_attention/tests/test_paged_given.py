"""Tests of stage 06's given code: argument checks and the hooks in stage 05's Engine."""

from __future__ import annotations

import pytest
import torch

import course
from solutions.batching import ContinuousBatching, Engine

p = course.load("paged")

pytestmark = pytest.mark.given


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4"])
def test_bad_pool_sizes(bad):
    with pytest.raises(ValueError, match="num_blocks"):
        p.BlockAllocator(bad, 4)
    with pytest.raises(ValueError, match="block_size"):
        p.BlockAllocator(4, bad)


def test_bad_shapes_are_clear_errors():
    q = torch.randn(2, 2, 1, 4)
    pool = torch.zeros(5, 3, 2, 4)
    tables = torch.zeros(2, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="k_pool"):
        p.paged_attention(q, torch.zeros(5, 3, 2, 5), pool, tables, torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="block_tables"):
        p.paged_attention(q, pool, pool, tables[:1], torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="q_pos"):
        p.paged_attention(q, pool, pool, tables, torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("kw, match", [
    (dict(block_size=0), "block_size"), (dict(block_size=2.0), "block_size"), (dict(num_blocks=0), "num_blocks"),
    (dict(enable_prefix_caching="yes"), "enable_prefix_caching"), (dict(max_len=999), "max_len"),
])
def test_bad_configurations(model, kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        p.PagedEngine(model, ContinuousBatching(2), **kw)


def test_stage_05_engine_is_unchanged_by_the_hooks(model):
    """The given Engine still builds its contiguous cache (the paged one only in the subclass)."""
    e = Engine(model, ContinuousBatching(3), max_len=20)
    assert type(e.cache).__name__ == "KVCache" and e.scheduler.max_cache_tokens == 60
    assert not hasattr(e.cache, "attend")
    torch.testing.assert_close(e.cache.lengths, torch.zeros(3, dtype=torch.long))


def test_hash_is_chained_over_the_parent():
    a = p.hash_block(None, [1, 2, 3])
    assert a == p.hash_block(None, (1, 2, 3))
    assert p.hash_block(a, [4, 5, 6]) != p.hash_block(p.hash_block(None, [9, 9, 9]), [4, 5, 6]), \
        "the same block after different prefixes must not share a key"


@pytest.mark.skipif(not p.HAS_TRITON, reason="triton is not installed")
def test_kernel_shape_and_argument_errors():
    q = torch.zeros(2, 2, 3, 4)
    pool = torch.zeros(4, 2, 2, 4)
    with pytest.raises((ValueError, RuntimeError), match="T = 1|interpreter"):
        p.paged_decode_triton(q, pool, pool, torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))
