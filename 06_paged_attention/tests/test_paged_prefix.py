"""Exercise 6.6: prefix caching — chained block hashes, hits that check the tokens, LRU
reuse of freed cached blocks — and regression tests for the bugs public engines shipped:
a stale hash entry when a block is reused, a 100% prefix hit (the last token must still
be computed), a preempted request that hits the prefix cache when it comes back. The tests
that run requests through the `PagedEngine` count for 6.8 (which requires 6.6), so that
with 6.8 unfilled they are "blocked by 6.8" rather than failures of 6.6."""

from __future__ import annotations

import pytest
import torch

import course
from solutions.batching import ContinuousBatching, Request
from solutions.workload import Trace, TraceRequest

p = course.load("paged")

pytestmark = pytest.mark.exercise("6.6")


def test_lookup_checks_the_tokens_and_reuse_forgets_the_hash():
    a = p.BlockAllocator(3, 2)
    (b,) = a.allocate(1)
    h = p.hash_block(None, [7, 8])
    assert a.register(b, h, [7, 8])
    assert a.lookup(h, [7, 8]) == b
    assert a.lookup(h, [7, 9]) is None, "a hit must compare the stored tokens, not only the hash"
    a.free([b])
    assert a.lookup(h, [7, 8]) == b, "a freed cached block stays reusable until evicted"
    a.take(b)
    assert a.ref_counts[b] == 1 and a.num_free_blocks == 2, "a hit on a free block takes it out of the queue"
    a.free([b])
    a.allocate(3)  # evicts everything, the cached block last
    assert a.lookup(h, [7, 8]) is None, "a reused block's stale hash entry was left behind"
    assert h not in a.cached
    a.check()


def test_lru_evicts_uncached_blocks_first_then_the_oldest_cached():
    a = p.BlockAllocator(4, 1)
    blocks = a.allocate(4)
    for i, b in enumerate(blocks[:3]):
        a.register(b, p.hash_block(None, [i]), [i])
    a.free([blocks[0]])
    a.free([blocks[1]])
    a.free([blocks[3]])  # uncached
    assert a.allocate(1) == [blocks[3]], "an uncached free block is reused before cached ones"
    assert a.allocate(1) == [blocks[0]], "then the least recently freed cached block"
    assert a.lookup(p.hash_block(None, [1]), [1]) == blocks[1]


def test_register_keeps_the_first_of_two_equal_blocks():
    a = p.BlockAllocator(3, 2)
    b1, b2 = a.allocate(2)
    h = p.hash_block(None, [1, 1])
    assert a.register(b1, h, [1, 1]), "register enters a full block under a key nobody holds: True"
    assert not a.register(b2, h, [1, 1]), (
        "a second block under a key already registered is not entered (False): the FIRST block for a key stays")
    assert a.lookup(h, [1, 1]) == b1, "the first block registered under a key is the one a lookup finds"
    a.free([b1, b2])
    a.check()


def test_commit_enters_the_full_blocks_under_chained_keys():
    c = p.PagedKVCache(1, 2, 1, 32, 2, num_blocks=10, block_size=4)
    tokens = list(range(20, 34))
    c.reserve(torch.tensor([0]), torch.tensor([14]))
    c.lengths[0] = 10                       # blocks 0 and 1 full, block 2 holds 2 of its 4
    c.commit(0, tokens)
    assert c.row_hashes[0] == c.prefix_hashes(tokens, 2) and len(c.allocator.cached) == 2, (
        f"with 10 tokens in blocks of 4, commit enters blocks 0 and 1 only, under the chained keys prefix_hashes "
        f"gives (block 1's key hashes block 0's key with its tokens): {len(c.row_hashes[0])} keys in row_hashes, "
        f"{len(c.allocator.cached)} blocks cached")
    assert not c.allocator.is_cached(c.tables[0][2]), "a partly filled block is never entered into the cache"
    c.lengths[0] = 14                       # block 2 is full now
    c.commit(0, tokens)
    assert c.row_hashes[0] == c.prefix_hashes(tokens, 3), (
        "a later commit continues the chain from the last committed key: block 2's key hashes block 1's with block "
        "2's tokens")
    assert c.allocator.lookup(c.row_hashes[0][2], tokens[8:12]) == c.tables[0][2]


def test_match_prefix_never_covers_the_last_token():
    c = p.PagedKVCache(1, 2, 1, 32, 2, num_blocks=10, block_size=4)
    tokens = list(range(12))
    c.reserve(torch.tensor([0]), torch.tensor([12]))
    c.lengths[0] = 12
    c.commit(0, tokens)
    assert len(c.allocator.cached) == 3
    assert c.match_prefix(tokens) == c.tables[0][:2], "a 100% hit must leave the last block to compute"
    assert c.match_prefix(tokens + [99]) == c.tables[0][:3]
    assert c.match_prefix([0, 1, 2, 3, 5, 5, 6, 7, 8]) == c.tables[0][:1], "the walk stops at the first miss"
    other = tokens[:4] + [9, 9, 9, 9] + tokens[8:] + [99]  # block 1 differs; block 2's key and tokens match
    assert c.match_prefix(other, c.row_hashes[0]) == c.tables[0][:1], (
        "the walk stops at the first miss, even when a later block's key and tokens are found (a block "
        "after a miss belongs to another prefix: its K/V were computed after other tokens)")
    assert c.assign_prefix(1, tokens + [99]) == 12
    assert c.allocator.ref_counts[c.tables[0][0]] == 2


def prompts_sharing(prefix_len: int, n: int, seed: int = 0) -> list[tuple[int, ...]]:
    g = torch.Generator().manual_seed(seed)
    common = torch.randint(0, 256, (prefix_len,), generator=g).tolist()
    return [tuple(common + torch.randint(0, 256, (int(torch.randint(1, 6, (1,), generator=g)),),
                                         generator=g).tolist()) for _ in range(n)]


@pytest.mark.exercise("6.8")  # through the PagedEngine
@pytest.mark.parametrize("bs", [4, 5])
def test_shared_prefix_hits_and_outputs_are_unchanged(model, alone, serve, bs):
    prompts = prompts_sharing(20, 6)
    trace = Trace(tuple(TraceRequest(0.05 * i, pr, 6) for i, pr in enumerate(prompts)))
    res = serve(lambda c: p.PagedEngine(model, ContinuousBatching(4), block_size=bs, num_blocks=40, clock=c), trace)
    e = res.engine
    for r in res.requests:
        assert r.output == alone(r.prompt, 6)[0], f"request {r.request_id}: a prefix hit changed the output"
    later = res.requests[1:]
    assert all(r.num_cached_tokens == (20 // bs) * bs for r in later), [r.num_cached_tokens for r in later]
    assert res.requests[0].num_cached_tokens == 0
    assert e.prefix_hits == sum(r.num_cached_tokens for r in res.requests)
    assert e.prefix_queries == sum(len(r.prompt) for r in res.requests)
    prefill = sum(s.prefill_tokens for s in e.steps)
    assert prefill == sum(len(r.prompt) for r in res.requests) - e.prefix_hits - 0, "hits were recomputed"


@pytest.mark.exercise("6.8")  # through the PagedEngine
def test_full_prefix_hit_still_computes_the_last_token(model, alone):
    e = p.PagedEngine(model, ContinuousBatching(2), block_size=4, num_blocks=20)
    prompt = tuple(range(30, 46))  # 16 tokens: 4 full blocks
    first = e.add_request(Request(prompt, 5))
    while e.has_unfinished():
        e.step()
    again = e.add_request(Request(prompt, 5))
    while e.has_unfinished():
        e.step()
    assert again.num_cached_tokens == 12, "a 100% hit must leave the last block (and token) to compute"
    assert first.output == again.output == alone(prompt, 5)[0]


@pytest.mark.exercise("6.8")  # through the PagedEngine
def test_stale_hash_entry_is_never_hit(model, alone):
    """A cached block evicted and rewritten by someone else must not be found by its old hash."""
    e = p.PagedEngine(model, ContinuousBatching(1), block_size=4, num_blocks=10)
    a = tuple(range(10, 30))
    r = e.add_request(Request(a, 4))
    while e.has_unfinished():
        e.step()
    for i in range(3):  # other prompts evict a's cached blocks and reuse them
        e.add_request(Request(tuple(range(100 + 20 * i, 120 + 20 * i)), 16))
        while e.has_unfinished():
            e.step()
    again = e.add_request(Request(a, 4))
    while e.has_unfinished():
        e.step()
    assert again.output == r.output == alone(a, 4)[0]
    e.allocator.check()


@pytest.mark.exercise("6.8")  # through the PagedEngine
def test_preempted_request_hits_the_cache_when_it_comes_back(model, alone, serve):
    """Memory so tight that requests are preempted; their freed blocks stay cached, and
    coming back they start from them — with the same outputs."""
    prompts = prompts_sharing(8, 6, seed=2)
    trace = Trace(tuple(TraceRequest(0.0, pr, 24) for pr in prompts))
    res = serve(lambda c: p.PagedEngine(model, ContinuousBatching(4), block_size=4, num_blocks=16, clock=c), trace)
    e = res.engine
    assert e.num_preemptions > 0, "the scenario must preempt"
    for r in res.requests:
        assert r.output == alone(r.prompt, 24)[0], f"request {r.request_id} changed after preemption"
    resumed = [r for r in res.requests if r.preemptions]
    assert resumed
    recomputed = sum(s.prefill_tokens for s in e.steps)
    no_cache = serve(lambda c: p.PagedEngine(model, ContinuousBatching(4), block_size=4, num_blocks=16, clock=c,
                                             enable_prefix_caching=False), trace).engine
    assert recomputed < sum(s.prefill_tokens for s in no_cache.steps), "resumed requests recomputed everything"


@pytest.mark.exercise("6.8")  # through the PagedEngine
def test_prefix_caching_off_never_hits(model, serve):
    prompts = prompts_sharing(20, 4)
    trace = Trace(tuple(TraceRequest(0.05 * i, pr, 4) for i, pr in enumerate(prompts)))
    res = serve(lambda c: p.PagedEngine(model, ContinuousBatching(4), block_size=4, clock=c,
                                        enable_prefix_caching=False), trace)
    assert res.engine.prefix_hits == 0 and all(r.num_cached_tokens == 0 for r in res.requests)
    assert not res.engine.allocator.cached
