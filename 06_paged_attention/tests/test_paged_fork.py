"""Exercise 6.7: fork and copy-on-write. Forked rows share blocks without copying; a row
that writes into a shared block gets its own copy first and the others never see its
writes; parallel sampling (`add_forked`) computes the prompt once and every child gets
exactly what it gets generated alone with its own seed."""

from __future__ import annotations

import pytest
import torch

import course
from solutions.batching import ContinuousBatching, Request, SamplingParams

p = course.load("paged")

pytestmark = pytest.mark.exercise("6.7")


def write_tokens(c, row: int, values: list[float]) -> None:
    start = int(c.lengths[row])
    n = len(values)
    c.reserve(torch.tensor([row]), torch.tensor([start + n]))
    kv = torch.tensor(values, dtype=torch.float32)[:, None, None].expand(n, 1, 2).contiguous()
    c.write(0, torch.full((n,), row), torch.arange(start, start + n), kv, kv + 100)
    c.lengths[row] += n


def read(c, row: int) -> list[float]:
    K, _ = c.view(0, torch.tensor([row]), int(c.lengths[row]))
    return K[0, 0, :, 0].tolist()


def test_fork_shares_blocks_and_copy_on_write_isolates_writes():
    c = p.PagedKVCache(1, 3, 1, 16, 2, num_blocks=8, block_size=4)
    write_tokens(c, 0, [1, 2, 3, 4, 5, 6])            # blocks: full + half-full
    c.fork_row(0, 1)
    assert c.tables[1] == c.tables[0] and int(c.lengths[1]) == 6
    assert [c.allocator.ref_counts[b] for b in c.tables[0]] == [2, 2]
    assert c.allocator.num_free_blocks == 6, "a fork must not copy any block"
    write_tokens(c, 1, [70])                           # into the shared half-full block: copy first
    assert c.tables[1][0] == c.tables[0][0], "the full block stays shared"
    assert c.tables[1][1] != c.tables[0][1], "the written block must be the row's own copy"
    assert read(c, 0) == [1, 2, 3, 4, 5, 6] and read(c, 1) == [1, 2, 3, 4, 5, 6, 70]
    write_tokens(c, 0, [80, 81, 82])                   # the original now writes alone: no copy needed
    assert read(c, 0) == [1, 2, 3, 4, 5, 6, 80, 81, 82] and read(c, 1) == [1, 2, 3, 4, 5, 6, 70]
    c.allocator.check()
    c.reset([0])
    c.reset([1])
    assert c.allocator.num_free_blocks == 8


def test_copy_on_write_with_three_sharers_and_a_full_pool():
    c = p.PagedKVCache(1, 3, 1, 16, 2, num_blocks=3, block_size=4)
    write_tokens(c, 0, [1, 2])
    c.fork_row(0, 1)
    c.fork_row(0, 2)
    write_tokens(c, 2, [9])
    write_tokens(c, 1, [8])
    assert c.allocator.num_free_blocks == 0
    write_tokens(c, 0, [7])                            # the last holder writes in place
    assert [read(c, r) for r in range(3)] == [[1, 2, 7], [1, 2, 8], [1, 2, 9]]
    with pytest.raises(p.CacheFullError):
        write_tokens(c, 0, [1, 1])                     # a new block: none left
    c.allocator.check()


def test_two_sharers_reserving_in_one_call_copy_once():
    """Rows 0 and 1 share a half-full block and reserve in ONE call: row 0 copies it, and
    then row 1 is its last holder: it keeps the block (no second copy)."""
    c = p.PagedKVCache(1, 2, 1, 16, 2, num_blocks=4, block_size=4)
    write_tokens(c, 0, [1, 2, 3])
    c.fork_row(0, 1)
    (shared,) = c.tables[0]
    c.reserve(torch.tensor([0, 1]), torch.tensor([4, 4]))
    assert c.tables[0] != [shared], "the first writer of a shared block gets its own copy"
    assert c.tables[1] == [shared], (
        "copy-on-write copies only a block that is still shared when its turn comes: after row 0's "
        "copy, row 1 holds the block alone (count 1) and must keep it, not copy it again")
    assert c.allocator.ref_counts[shared] == 1 and c.allocator.num_free_blocks == 2
    for row, value in ((0, 10.0), (1, 11.0)):
        kv = torch.full((1, 1, 2), value)
        c.write(0, torch.tensor([row]), torch.tensor([3]), kv, kv)
        c.lengths[row] += 1
    assert read(c, 0) == [1, 2, 3, 10] and read(c, 1) == [1, 2, 3, 11]
    c.allocator.check()


def test_reserve_counts_the_copies_before_allocating_anything():
    """Two rows share a half-full block; one free block left. Row 0 grows by a block and
    both will write into the shared one (two copies): 3 blocks needed, 1 free, so reserve
    raises CacheFullError and changes nothing (not: the growth allocated, then a copy failing)."""
    c = p.PagedKVCache(1, 2, 1, 16, 2, num_blocks=2, block_size=4)
    write_tokens(c, 0, [1, 2, 3])
    c.fork_row(0, 1)
    before = ([list(t) for t in c.tables], list(c.allocator.ref_counts), c.allocator.num_free_blocks)
    with pytest.raises(p.CacheFullError):
        c.reserve(torch.tensor([0, 1]), torch.tensor([5, 4]))
    after = ([list(t) for t in c.tables], list(c.allocator.ref_counts), c.allocator.num_free_blocks)
    assert after == before, (
        "reserve is all or nothing: the free blocks must cover every row's growth PLUS one block per "
        f"shared block the rows will write (its copy), checked before allocating anything; {before} -> {after}")


def test_fork_into_a_busy_row_is_an_error():
    c = p.PagedKVCache(1, 2, 1, 16, 2, num_blocks=4, block_size=4)
    write_tokens(c, 0, [1])
    write_tokens(c, 1, [2])
    with pytest.raises(ValueError, match="not empty"):
        c.fork_row(0, 1)


@pytest.mark.exercise("6.8")  # parallel sampling runs through the PagedEngine
def test_parallel_sampling_children_equal_generation_alone(model, alone):
    e = p.PagedEngine(model, ContinuousBatching(4), block_size=4, num_blocks=30)
    prompt = tuple(range(50, 63))  # 13 tokens: 3 full blocks + 1
    kids = e.add_forked(Request(prompt, 10, sampling=SamplingParams(temperature=1.0, seed=7), request_id="q"), 3)
    assert [k.request_id for k in kids] == ["q-0", "q-1", "q-2"]
    assert [k.sampling.seed for k in kids] == [7, 8, 9]
    e.step()  # the prompt, once; the siblings fork from it
    assert sum(s.prefill_tokens for s in e.steps) == 13, "the prompt must be computed once, not per child"
    assert e.allocator.num_used_blocks == 4, "children share the prompt's blocks"
    while e.has_unfinished():
        e.step()
    for k in kids:
        assert k.output == alone(prompt, 10, k.sampling)[0], f"{k.request_id} differs from its seed alone"
    assert len({tuple(k.output) for k in kids}) > 1
    assert e.allocator.num_free_blocks == e.allocator.num_blocks


@pytest.mark.exercise("6.8")  # parallel sampling runs through the PagedEngine
def test_greedy_forks_agree_and_a_sibling_abort_is_clean(model, alone):
    e = p.PagedEngine(model, ContinuousBatching(4), block_size=3, num_blocks=30)
    kids = e.add_forked(Request(tuple(range(20)), 6, request_id="g"), 4)
    assert e.abort("g-3")                              # before the fork happens
    while e.has_unfinished():
        e.step()
    want = alone(tuple(range(20)), 6)[0]
    assert [k.output for k in kids[:3]] == [want] * 3
    assert kids[3].finish_reason == "abort" and kids[3].output == []
    assert e.allocator.num_free_blocks == e.allocator.num_blocks


@pytest.mark.exercise("6.8")  # parallel sampling runs through the PagedEngine
def test_aborting_the_leader_queues_its_siblings(model, alone):
    e = p.PagedEngine(model, ContinuousBatching(4), block_size=4, num_blocks=30)
    kids = e.add_forked(Request(tuple(range(9)), 4, request_id="a"), 3)
    e.abort("a-0")
    while e.has_unfinished():
        e.step()
    assert kids[0].finish_reason == "abort"
    assert [k.output for k in kids[1:]] == [alone(tuple(range(9)), 4)[0]] * 2


@pytest.mark.exercise("6.8")  # parallel sampling runs through the PagedEngine
def test_forks_under_memory_pressure(model, alone):
    """More forks than memory for their copies: preemption and recompute, same outputs."""
    e = p.PagedEngine(model, ContinuousBatching(4), block_size=4, num_blocks=9)
    kids = e.add_forked(Request(tuple(range(30, 40)), 14, sampling=SamplingParams(temperature=0.9, seed=1)), 4)
    while e.has_unfinished():
        e.step()
        e.allocator.check()
    assert e.num_preemptions > 0
    for k in kids:
        assert k.output == alone(k.prompt, 14, k.sampling)[0]
    assert e.allocator.num_free_blocks == e.allocator.num_blocks


@pytest.mark.exercise("6.8")  # parallel sampling runs through the PagedEngine
def test_add_forked_bad_arguments(model):
    e = p.PagedEngine(model, ContinuousBatching(2), block_size=4)
    for n in (0, -1, 1.5):
        with pytest.raises(ValueError, match="n must"):
            e.add_forked(Request([1, 2], 3), n)
    e.add_request(Request([1], 2, request_id="x-1"))
    with pytest.raises(ValueError, match="already"):
        e.add_forked(Request([1, 2], 3, request_id="x"), 2)
    with pytest.raises(TypeError):
        e.add_forked("hello", 2)


@pytest.mark.exercise("6.8")  # parallel sampling runs through the PagedEngine
def test_a_full_pool_preempts_a_fork_instead_of_failing_its_copy(model, alone):
    """Two samples of a 6-token prompt in a 2-block pool: after the fork both want to write
    into the shared half-full block and no block is free for the copy. The scheduler must
    have charged that copy (and preempt one sample), not let the step fail."""
    e = p.PagedEngine(model, ContinuousBatching(2), block_size=4, num_blocks=2)
    kids = e.add_forked(Request(tuple(range(60, 66)), 2, sampling=SamplingParams(temperature=1.0, seed=3)), 2)
    while e.has_unfinished():
        e.step()
    assert e.num_preemptions >= 1
    for k in kids:
        assert k.output == alone(k.prompt, 2, k.sampling)[0]
    assert e.allocator.num_free_blocks == 2


@pytest.mark.exercise("6.8")  # parallel sampling runs through the PagedEngine
def test_forked_siblings_report_the_leaders_cached_tokens(model, alone):
    """A prompt already in the prefix cache, sampled 3 times: the leader takes 8 of its 13
    tokens from the cache at admission; its siblings share the leader's blocks, so they
    report the same num_cached_tokens."""
    e = p.PagedEngine(model, ContinuousBatching(4), block_size=4, num_blocks=30)
    prompt = tuple(range(50, 63))  # 13 tokens: 3 full blocks + 1
    e.add_request(Request(prompt[:10] + (1, 2), 2, request_id="warm"))  # caches blocks 0-1 (8 tokens)
    while e.has_unfinished():
        e.step()
    kids = e.add_forked(Request(prompt, 4, sampling=SamplingParams(temperature=1.0, seed=5), request_id="k"), 3)
    e.step()
    assert [k.num_cached_tokens for k in kids] == [8, 8, 8], (
        f"num_cached_tokens {[k.num_cached_tokens for k in kids]}: a forked sibling takes the leader's "
        "num_computed AND num_cached_tokens (it shares the leader's prompt blocks)")
    while e.has_unfinished():
        e.step()
    for k in kids:
        assert k.output == alone(prompt, 4, k.sampling)[0]
