"""Exercise 6.1: the block allocator — free queue, reference counts, running out cleanly;
and (6.6) a Hypothesis state machine over the allocator, the paged cache and the prefix
cache: thousands of random allocate / append / fork / free / preempt / hit operations,
after each of which the reference counts match the block tables, no block leaks, and
every sequence still reads back exactly its own tokens."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import course

p = course.load("paged")

pytestmark = pytest.mark.exercise("6.1")


def test_allocate_gives_distinct_blocks_and_free_returns_them():
    a = p.BlockAllocator(8, 4)
    got = a.allocate(5)
    assert len(set(got)) == 5 and all(0 <= b < 8 for b in got)
    assert a.num_free_blocks == 3 and a.num_used_blocks == 5
    assert all(a.ref_counts[b] == 1 for b in got)
    a.free(got[:2])
    assert a.num_free_blocks == 5
    a.check()
    assert a.usage() == pytest.approx(3 / 8)


def test_running_out_raises_and_changes_nothing():
    a = p.BlockAllocator(4, 2)
    held = a.allocate(3)
    assert a.can_allocate(1) and not a.can_allocate(2)
    before = (list(a.ref_counts), list(a.free_queue))
    with pytest.raises(p.CacheFullError):
        a.allocate(2)
    assert (list(a.ref_counts), list(a.free_queue)) == before, "a failed allocate must not take blocks"
    a.free(held)
    assert a.allocate(4) and a.num_free_blocks == 0


def test_fork_shares_and_the_last_free_releases():
    a = p.BlockAllocator(4, 2)
    blocks = a.allocate(2)
    a.fork(blocks)
    assert [a.ref_counts[b] for b in blocks] == [2, 2]
    a.free(blocks)
    assert a.num_free_blocks == 2, "a block still held by a fork must not be free"
    a.free(blocks)
    assert a.num_free_blocks == 4
    a.check()


def test_bad_ids_double_free_and_forking_a_free_block_are_errors():
    a = p.BlockAllocator(4, 2)
    (b,) = a.allocate(1)
    with pytest.raises(ValueError, match="outside"):
        a.free([7])
    with pytest.raises(ValueError, match="outside"):
        a.fork([-1])
    a.free([b])
    with pytest.raises(ValueError, match="double free|already free"):
        a.free([b])
    with pytest.raises(ValueError, match="free"):
        a.fork([b])
    a.check()


def test_a_block_listed_twice_but_held_once_is_a_double_free_and_nothing_changes():
    """Each occurrence of a block in `free`'s list lets go of it once: a block held once and
    listed twice is a double free, refused before any count changes (a check per distinct
    id, then two decrements, would take its count to -1)."""
    a = p.BlockAllocator(4, 2)
    b, c = a.allocate(2)
    before = (list(a.ref_counts), list(a.free_queue))
    with pytest.raises(ValueError, match="double free|already free"):
        a.free([c, b, b])
    assert (list(a.ref_counts), list(a.free_queue)) == before, (
        "a refused free changed the counts or the free queue: check every occurrence before any change")
    a.fork([b])
    a.free([b, b])  # held twice, listed twice: both let go
    assert a.ref_counts[b] == 0 and a.ref_counts[c] == 1
    a.check()


def test_free_queue_order_blocks_come_back_in_lru_order():
    """Uncached blocks freed go to the front (reused first); a sequence's blocks are
    released last one first."""
    a = p.BlockAllocator(6, 2)
    seq = a.allocate(3)           # 0, 1, 2
    a.free(seq)
    assert a.allocate(3) == list(seq), "freed uncached blocks are reused first, head of the sequence first"


# ---- the state machine (6.6: prefix caching on top of the allocator) --------------------

N_BLOCKS, BS, MAX_LEN = 12, 3, 18


class PagedMemory(RuleBasedStateMachine):
    """Sequences of tokens over a small alphabet (so prefixes repeat and hit the cache).
    The K/V written for token t at position i is (t, i): equal prefixes give equal K/V,
    exactly the property that makes prefix caching correct for a real model."""

    @initialize()
    def start(self):
        self.cache = p.PagedKVCache(1, 6, 1, MAX_LEN, 2, num_blocks=N_BLOCKS, block_size=BS, dtype=torch.float64)
        self.tokens: dict[int, list[int]] = {}     # row -> its tokens (all computed)
        self.hits = 0

    def _write(self, row: int, new: list[int]) -> None:
        c = self.cache
        start = int(c.lengths[row])
        c.reserve(torch.tensor([row]), torch.tensor([start + len(new)]))
        pos = torch.arange(start, start + len(new))
        kv = torch.stack([torch.tensor(new, dtype=torch.float64), pos.double()], dim=1)[:, None]  # (N, 1, 2)
        c.write(0, torch.full((len(new),), row), pos, kv, -kv)
        c.lengths[row] += len(new)
        self.tokens[row] = self.tokens.get(row, []) + new
        c.commit(row, self.tokens[row])

    @rule(data=st.data(), prompt=st.lists(st.integers(0, 2), min_size=1, max_size=10))
    def new_sequence(self, data, prompt):
        free = [r for r in range(self.cache.batch) if r not in self.tokens]
        if not free:
            return
        row = data.draw(st.sampled_from(free))
        cached = self.cache.assign_prefix(row, prompt)
        assert cached % BS == 0 and cached <= len(prompt) - 1
        self.hits += cached
        self.tokens[row] = list(prompt[:cached])
        try:
            self._write(row, list(prompt[cached:]))
        except p.CacheFullError:
            self.cache.reset([row])    # admission failed: give back what it took
            del self.tokens[row]

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), new=st.lists(st.integers(0, 2), min_size=1, max_size=4))
    def append(self, data, new):
        row = data.draw(st.sampled_from(sorted(self.tokens)))
        if len(self.tokens[row]) + len(new) > MAX_LEN:
            return
        free_before = self.cache.allocator.num_free_blocks
        try:
            self._write(row, new)
        except p.CacheFullError:
            assert self.cache.allocator.num_free_blocks == free_before, "a failed reserve must not take blocks"

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        free = [r for r in range(self.cache.batch) if r not in self.tokens]
        if not free:
            return
        src = data.draw(st.sampled_from(sorted(self.tokens)))
        dst = data.draw(st.sampled_from(free))
        self.cache.fork_row(src, dst)
        self.tokens[dst] = list(self.tokens[src])

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free_or_preempt(self, data):
        row = data.draw(st.sampled_from(sorted(self.tokens)))
        self.cache.reset([row])
        del self.tokens[row]

    @invariant()
    def consistent(self):
        if not hasattr(self, "cache"):
            return
        c = self.cache
        c.allocator.check()
        counts = [0] * N_BLOCKS
        for r in range(c.batch):
            for b in c.tables[r]:
                counts[b] += 1
        assert counts == c.allocator.ref_counts, "reference counts != block tables"
        assert c.allocator.num_free_blocks == sum(n == 0 for n in counts), "a block leaked"
        for r, toks in self.tokens.items():
            assert int(c.lengths[r]) == len(toks)
            assert len(c.tables[r]) == p.blocks_needed(len(toks), BS)
            K, V = c.view(0, torch.tensor([r]), len(toks))
            want = torch.stack([torch.tensor(toks, dtype=torch.float64), torch.arange(len(toks)).double()], 1)
            assert torch.equal(K[0, 0], want), f"row {r} reads back other tokens than its own"
            assert torch.equal(V[0, 0], -want)

    def teardown(self):
        if hasattr(self, "cache"):
            self.cache.reset()
            assert self.cache.allocator.num_free_blocks == N_BLOCKS, "blocks leaked after freeing every row"


PagedMemory.TestCase.settings = settings(max_examples=50, stateful_step_count=50, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])
# it forks (6.7) and uses the prefix cache (6.6): it counts for the last of them, which requires the others
test_paged_memory_state_machine = pytest.mark.exercise("6.7")(PagedMemory.TestCase)
