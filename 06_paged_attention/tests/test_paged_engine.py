"""Exercise 6.8: stage 05's engine and schedulers on paged memory. Every request gets the
same greedy (or seeded) tokens as on stage 05's contiguous cache and as generated alone,
whatever the policy, chunking, block size or memory pressure; admission and preemption
are by free blocks; the number running is limited by memory, not by max_len x rows."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import course
from solutions.batching import ContinuousBatching, Request, SamplingParams, StaticBatching, replay
from solutions.workload import Trace, TraceRequest, make_trace

p = course.load("paged")

pytestmark = pytest.mark.exercise("6.8")

POLICIES = {
    "continuous": lambda: ContinuousBatching(4),
    "chunked": lambda: ContinuousBatching(4, max_tokens_per_step=6),
    "static": lambda: StaticBatching(4),
    "static-skip": lambda: StaticBatching(4, fixed_shape=False),
}


def small_trace(seed: int, n: int = 10) -> Trace:
    return make_trace(n, profile="mix", rate=200.0, seed=seed, short_prompt=(2, 10), long_prompt=(14, 26),
                      short_output=(2, 8), long_output=(8, 16))


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("prefix", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_same_tokens_as_stage_05_and_alone(model, alone, serve, contiguous, policy, prefix):
    trace = small_trace(3)
    want = contiguous(POLICIES[policy](), trace)
    res = serve(lambda c: p.PagedEngine(model, POLICIES[policy](), block_size=4, clock=c,
                                        enable_prefix_caching=prefix), trace)
    assert [r.output for r in res.requests] == want
    for r in res.requests:
        assert r.output == alone(r.prompt, r.max_new_tokens)[0]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=8)
@given(seed=st.integers(0, 10_000), bs=st.integers(1, 9), blocks=st.integers(12, 40),
       budget=st.sampled_from([None, 5, 9]), prefix=st.booleans())
def test_random_traces_and_tight_memory(model, alone, serve, seed, bs, blocks, budget, prefix):
    """Random traces, block sizes and pool sizes (tight enough to preempt): outputs as alone."""
    trace = small_trace(seed, n=8)
    need = max(p.blocks_needed(len(r.prompt) + r.max_new_tokens, bs) for r in trace.requests)
    res = serve(lambda c: p.PagedEngine(model, ContinuousBatching(4, max_tokens_per_step=budget), block_size=bs,
                                        num_blocks=max(need, blocks * 4 // bs), clock=c,
                                        enable_prefix_caching=prefix), trace)
    for r in res.requests:
        assert r.output == alone(r.prompt, r.max_new_tokens)[0], f"request {r.request_id}"


@pytest.mark.parametrize("split", [False, True], ids=["one-call", "every-length-its-own-call"])
def test_rows_split_by_length_give_the_same_tokens(model, alone, serve, monkeypatch, split):
    """The given `PagedKVCache.attend` gathers rows of very different lengths in calls of
    their own (past `PAD_BLOCKS` padded blocks), and stage 05's `forward_chunks` gives a
    prompt chunk a forward of its own past `PAD_TOKENS` padded positions: split or not,
    every request gets the tokens it gets alone."""
    from solutions.batching import model_runner
    monkeypatch.setattr(p.PagedKVCache, "PAD_BLOCKS", 0 if split else 10**9)
    monkeypatch.setattr(model_runner, "PAD_TOKENS", 0 if split else 10**9)
    seen = []
    groups = p.PagedKVCache._length_groups
    monkeypatch.setattr(p.PagedKVCache, "_length_groups", lambda self, q_pos: seen.append(groups(self, q_pos)) or seen[-1])
    trace = make_trace(12, profile="mix", seed=5, short_prompt=(2, 6), long_prompt=(20, 30), short_output=(2, 8),
                       long_output=(8, 14))
    res = serve(lambda c: p.PagedEngine(model, ContinuousBatching(8), block_size=2, clock=c), trace)
    for r in res.requests:
        assert r.output == alone(r.prompt, r.max_new_tokens)[0], f"request {r.request_id}"
    assert max((len(g) for g in seen if g is not None), default=1) > 1 if split else all(g is None for g in seen)


def test_seeded_sampling_is_unchanged(model, alone, serve):
    sampling = SamplingParams(temperature=0.8, top_k=50, seed=11)
    trace = small_trace(5)
    res = serve(lambda c: p.PagedEngine(model, ContinuousBatching(4), block_size=3, num_blocks=20, clock=c),
                trace, sampling=sampling)
    for r in res.requests:
        assert r.output == alone(r.prompt, r.max_new_tokens, sampling)[0]


def test_memory_not_rows_limits_how_many_run(model, serve):
    """The same memory as a 4-row contiguous cache (4 x 48 tokens), 16 rows per step:
    short requests run far more than 4 at a time; and a small pool holds the count down."""
    trace = Trace(tuple(TraceRequest(0.0, tuple(range(1 + i, 6 + i)), 3) for i in range(16)))  # nothing shared
    peak = {}
    for name, blocks in (("same memory", 4 * 48 // 4), ("small pool", 6), ("default", None)):
        def make(c, blocks=blocks):
            e = p.PagedEngine(model, ContinuousBatching(16), block_size=4, num_blocks=blocks, max_len=48, clock=c)
            inner = e.step

            def step():
                out = inner()
                peak[name] = max(peak.get(name, 0), len(e.scheduler.running))
                return out

            e.step = step
            return e

        res = serve(make, trace)
        if blocks is None:
            assert res.engine.allocator.num_blocks == 16 * 48 // 4, "num_blocks=None: the contiguous cache's memory"
    assert peak["same memory"] == 16, "memory for 16 short requests is there: all should run together"
    assert peak["small pool"] <= 3, "each request needs 2 blocks: a 6-block pool runs at most 3"


def test_admission_charges_whole_blocks(model):
    e = p.PagedEngine(model, ContinuousBatching(8), block_size=8, num_blocks=4)
    for i in range(5):
        e.add_request(Request(tuple(range(1 + i, 10 + i)), 2))   # 9 prompt tokens + growth: 2 blocks each
    e.step()
    assert len(e.scheduler.running) == 2, "4 blocks hold two 9-token prompts (2 blocks each), not 4 x 9 tokens"
    assert e.kv_usage() == 1.0


def test_abort_frees_blocks_and_forget_drops_finished(model):
    e = p.PagedEngine(model, ContinuousBatching(2), block_size=4, num_blocks=12)
    a = e.add_request(Request(tuple(range(1, 14)), 8, request_id="a"))
    e.add_request(Request(tuple(range(2, 9)), 2, request_id="b"))
    e.step()
    assert e.allocator.num_used_blocks > 0
    assert e.abort("a") and a.finish_reason == "abort"
    while e.has_unfinished():
        e.step()
    assert e.allocator.num_free_blocks == 12
    with pytest.raises(ValueError, match="not finished|finished"):
        e2 = p.PagedEngine(model, ContinuousBatching(2), block_size=4)
        e2.add_request(Request([1, 2], 2, request_id="w"))
        e2.forget("w")
    assert e.forget("a") is a and "a" not in e.requests
    with pytest.raises(ValueError, match="no request"):
        e.forget("a")


def test_statistics_are_exposed(model):
    e = p.PagedEngine(model, ContinuousBatching(2), block_size=4, num_blocks=10)
    assert e.kv_usage() == 0.0 and e.num_preemptions == 0 and e.prefix_queries == e.prefix_hits == 0
    r = e.add_request(Request([5, 6, 7, 8, 9], 3))
    assert r.num_cached_tokens == 0
    e.step()
    assert e.kv_usage() == pytest.approx(2 / 10)   # 5 tokens + the next: 2 blocks of 4
    assert e.cache.nbytes == e.cache.k.nbytes * 2 and e.cache.block_size == 4 and e.cache.num_blocks == 10
    assert e.allocator.num_free_blocks == 8 and e.allocator.num_blocks == 10


def test_pool_smaller_than_one_request_is_refused_up_front(model):
    e = p.PagedEngine(model, ContinuousBatching(2), block_size=4, num_blocks=3)
    with pytest.raises(ValueError, match="blocks"):
        e.add_request(Request(tuple(range(10)), 5))   # 15 tokens: 4 blocks > 3
    with pytest.raises(ValueError, match="max_cache_tokens"):
        p.PagedEngine(model, ContinuousBatching(2, max_cache_tokens=13), block_size=4, num_blocks=3)
    with pytest.raises(ValueError, match="vocabulary"):
        e.add_request(Request([300], 1))


# ---- the block manager's counting rules, one by one -------------------------------------------

PREFIX = tuple(range(10, 26))  # 16 tokens: 4 full blocks of 4


def sharing_engine(model, num_blocks: int, n: int, max_new: int = 3):
    """n requests = PREFIX + one own token: the first one's prompt runs, then the n - 1
    others arrive together and find its 4 full blocks in the prefix cache (held by it)."""
    e = p.PagedEngine(model, ContinuousBatching(8), block_size=4, num_blocks=num_blocks)
    reqs = [e.add_request(Request(PREFIX + (100,), max_new, request_id="s0"))]
    e.step()
    reqs += [e.add_request(Request(PREFIX + (100 + i,), max_new, request_id=f"s{i}")) for i in range(1, n)]
    e.step()
    return e, reqs


def test_held_counts_a_shared_block_once(model):
    e, reqs = sharing_engine(model, num_blocks=10, n=3)
    bm = e.block_manager
    assert len(e.scheduler.running) == 3, "three requests sharing a 4-block prefix fit in 10 blocks"
    distinct = {b for r in e.scheduler.running for b in e.cache.tables[r.slot]}
    charged = sum(bm.charge(r) for r in e.scheduler.running)
    assert bm.held() == 4 * len(distinct) + charged, (
        f"held() = {bm.held()}: it must count a block several rows share ONCE (block_size x "
        f"{len(distinct)} distinct blocks + {charged} still charged), not once per row holding it")


def test_sharing_lets_more_requests_run_in_the_same_memory(model, alone):
    """Four requests sharing a 16-token prefix need 4 + 4 x 1 = 8 blocks together: a 10-block
    pool holds all four at once, without preempting (if each row's copy of the shared blocks
    were counted, the pool would look full after two)."""
    e, reqs = sharing_engine(model, num_blocks=10, n=4)
    assert len(e.scheduler.running) == 4 and e.num_preemptions == 0, (
        f"running {len(e.scheduler.running)}, preemptions {e.num_preemptions}: blocks shared through the "
        "prefix cache must be counted once in held(), so sharing saves memory")
    while e.has_unfinished():
        e.step()
    for r in reqs:
        assert r.output == alone(r.prompt, 3)[0]


def test_charge_of_a_waiting_request_subtracts_hits_on_held_blocks_only(model):
    e, _ = sharing_engine(model, num_blocks=12, n=1, max_new=6)
    bm = e.block_manager
    waiting = Request(PREFIX + (7,), 2, request_id="w")  # 17 tokens: 5 blocks, 4 of them held by s0
    assert bm.charge(waiting) == 4, (
        f"charge = {bm.charge(waiting)}: a waiting request's prefix-cache hits on blocks somebody holds cost "
        "no new memory (5 blocks needed - 4 held hits = 1 block of 4 tokens)")
    while e.has_unfinished():
        e.step()
    assert e.allocator.num_free_blocks == 12 and len(e.allocator.cached) >= 4
    assert bm.charge(waiting) == 20, (
        f"charge = {bm.charge(waiting)}: a hit on a FREE cached block still costs its block (it leaves the "
        "free queue): 5 blocks = 20 tokens")


def test_num_cached_tokens_is_set_at_the_first_admission_only(model, alone):
    """Preempted requests come back and find their own blocks in the prefix cache; their
    num_cached_tokens must stay what their FIRST admission found."""
    g = torch.Generator().manual_seed(2)
    common = torch.randint(0, 256, (8,), generator=g).tolist()
    trace = Trace(tuple(TraceRequest(0.0, tuple(common + [i, i + 1]), 24) for i in range(6)))
    e = p.PagedEngine(model, ContinuousBatching(4), block_size=4, num_blocks=16)
    admissions: dict[str, list[int]] = {}
    inner = e.block_manager.admit

    def admit(request):
        cached = inner(request)
        admissions.setdefault(request.request_id, []).append(cached)
        return cached

    e.block_manager.admit = admit
    res = replay(e, trace)
    assert e.num_preemptions > 0
    changed = [r for r in res.requests
               if min(admissions[r.request_id][-1], len(r.prompt)) != min(admissions[r.request_id][0], len(r.prompt))]
    assert changed, "the scenario must re-admit a request that then finds more of its prompt cached"
    for r in res.requests:
        want = min(admissions[r.request_id][0], len(r.prompt))
        assert r.num_cached_tokens == want, (
            f"{r.request_id}: num_cached_tokens {r.num_cached_tokens}, admissions found {admissions[r.request_id]}: "
            f"it is set at the FIRST admission only (min(found, prompt length) = {want}); a later admission "
            "after preemption leaves it as it was")
        assert r.output == alone(r.prompt, 24)[0]
