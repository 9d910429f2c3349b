"""Stage 06's held-out cases: other sizes, block sizes, seeds and edge cases."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import course
from solutions.batching import ContinuousBatching, Request, SamplingParams, StaticBatching
from solutions.kv_cache import forward_cached
from solutions.workload import Trace, TraceRequest, make_trace

p = course.load("paged")
TESTS = Path(__file__).resolve().parent.parent / "tests"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_stage06_hidden_{name}", TESTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_attention_tests = _load("test_paged_attention")  # its helpers; loaded once, outside any @given
# ---- 6.1 ----------------------------------------------------------------------------------------

def _fixed_allocator_run() -> dict:
    """One fixed sequence of allocator calls, as plain data. Block ids are reported as they
    are: the free queue pins them (taken from the front; freed last-first, uncached ones to
    the front)."""
    a = p.BlockAllocator(9, 5)
    x = a.allocate(3)
    y = a.allocate(2)
    a.fork(x)
    a.free(y)
    z = a.allocate(4)
    a.free(x)
    with pytest.raises(p.CacheFullError) as err:
        a.allocate(8)
    after_full = list(a.free_queue)
    a.free(z)
    return {"x": [int(b) for b in x], "y": [int(b) for b in y], "z": [int(b) for b in z],
            "refs": [int(c) for c in a.ref_counts], "error": type(err.value).__name__,
            "free_queue_when_full": [int(b) for b in after_full],
            "free_queue": [int(b) for b in a.free_queue], "num_free": int(a.num_free_blocks),
            "empty": [int(b) for b in a.allocate(0)]}


@pytest.mark.exercise("6.1")
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=30)
@given(ops=st.lists(st.tuples(st.sampled_from(["alloc", "free", "fork"]), st.integers(0, 6)), max_size=60))
def test_allocator_against_a_model_of_reference_counts(ops):
    course.answer("fixed_run", _fixed_allocator_run())  # the same every example (the drawn ops vary)
    a = p.BlockAllocator(9, 5)
    held: list[list[int]] = []   # each entry: one holder's blocks
    for op, k in ops:
        if op == "alloc":
            if a.can_allocate(k):
                held.append(a.allocate(k))
            else:
                with pytest.raises(p.CacheFullError):
                    a.allocate(k)
        elif op == "free" and held:
            a.free(held.pop(k % len(held)))
        elif op == "fork" and held:
            blocks = held[k % len(held)]
            a.fork(blocks)
            held.append(list(blocks))
        counts = [0] * 9
        for blocks in held:
            for b in blocks:
                counts[b] += 1
        assert counts == a.ref_counts
        assert a.num_free_blocks == counts.count(0)
        a.check()
    assert a.allocate(0) == []


# ---- 6.2 / 6.3 ------------------------------------------------------------------------------------

@pytest.mark.exercise("6.2")
def test_slot_mapping_with_int32_tables_and_large_ids():
    tables = torch.tensor([[2**20, 3], [7, 2**21]], dtype=torch.int32)
    slots = p.slot_mapping(tables, torch.tensor([0, 1, 1]), torch.tensor([0, 3, 130]), 128)
    course.answer("slots", slots)
    course.answer("dtype", str(slots.dtype))
    assert slots.dtype == torch.int64
    assert slots.tolist() == [2**20 * 128, 7 * 128 + 3, 2**21 * 128 + 2]


@pytest.mark.exercise("6.2")
def test_reserve_over_a_slice_of_rows_and_block_size_one():
    c = p.PagedKVCache(1, 4, 1, 10, 2, num_blocks=40, block_size=1)
    c.reserve(slice(1, 4), torch.tensor([3, 0, 10]))
    course.answer("table_lengths", [len(t) for t in c.tables])
    course.answer("num_free", int(c.allocator.num_free_blocks))
    # the ids themselves, in sorted order (which row takes its blocks first is not the point)
    course.answer("used_blocks", sorted(int(b) for t in c.tables for b in t))
    course.answer("padded_widths", (c.block_tables >= 0).sum(1))
    assert [len(t) for t in c.tables] == [0, 3, 0, 10]
    assert c.allocator.num_free_blocks == 27


@pytest.mark.exercise("6.3")
@pytest.mark.parametrize("bs", [7, 48])
def test_forward_cached_through_view_with_other_block_sizes(model, bs):
    class ViewOnly(p.PagedKVCache):
        attend = None

    torch.manual_seed(5)
    seqs = torch.randint(0, 256, (2, 20))
    full = model(seqs)
    cache = ViewOnly.for_model(model, 2, max_len=48, block_size=bs, num_blocks=10)
    forward_cached(model, seqs[:, :13], cache)
    out = [forward_cached(model, seqs[:, t:t + 1], cache)[:, 0] for t in range(13, 20)]
    course.answer("decode_logits", torch.stack(out, 1), rtol=1e-7, atol=1e-9)  # float64 (2, 7, 256)
    course.answer("lengths", cache.lengths)
    torch.testing.assert_close(torch.stack(out, 1), full[:, 13:], atol=1e-10, rtol=1e-10)


# ---- 6.4 ----------------------------------------------------------------------------------------

@pytest.mark.exercise("6.4")
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=15)
@given(bs=st.integers(8, 13), T=st.integers(1, 8), data=st.data())
def test_paged_attention_float64_and_long_chunks(bs, T, data):
    fixed, fixed_want = _paged_attention_case(bs=11, T=6, seed=321, starts=[0, 27])  # the same every example
    course.answer("fixed_case", fixed, rtol=1e-7, atol=1e-10)
    torch.testing.assert_close(fixed, fixed_want, atol=1e-12, rtol=1e-12)
    got, want = _paged_attention_case(bs, T, data.draw(st.integers(0, 999)),
                                      data.draw(st.lists(st.integers(0, 30), min_size=2, max_size=2)))
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


@pytest.mark.exercise("6.4")
def test_paged_attention_on_grouped_query_pools_in_float64():
    """6 query heads on pools of 2 K/V heads (groups of 3), a chunk of 4 in rows of other lengths."""
    gen = torch.Generator().manual_seed(606)
    lengths, H, H_kv, D, T = [13, 6], 6, 2, 5, 4
    K = torch.randn(2, H_kv, 13, D, generator=gen, dtype=torch.float64)
    V = torch.randn(2, H_kv, 13, D, generator=gen, dtype=torch.float64)
    q = torch.randn(2, H, T, D, generator=gen, dtype=torch.float64)
    q_pos = torch.tensor([[n - T + t for t in range(T)] for n in lengths])
    k_pool, v_pool, tables = _attention_tests.scatter_into_blocks(K, V, lengths, 4, 12, gen)
    got = p.paged_attention(q, k_pool.double(), v_pool.double(), tables, q_pos)
    course.answer("y", got, rtol=1e-7, atol=1e-10)
    mask = (torch.arange(13) <= q_pos[:, :, None])[:, None]
    want = F.scaled_dot_product_attention(q, torch.nan_to_num(K).repeat_interleave(3, 1),
                                          torch.nan_to_num(V).repeat_interleave(3, 1), attn_mask=mask)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12,
                               msg=lambda m: f"query head h reads K/V head h // 3: {m}")


def _paged_attention_case(bs, T, seed, starts):
    """(paged_attention, the dense oracle) of a float64 case: 2 rows starting at `starts`, T new tokens."""
    gen = torch.Generator().manual_seed(seed)
    B, H, D = 2, 2, 5
    lengths = [s + T for s in starts]
    L = max(lengths)
    K = torch.randn(B, H, L, D, generator=gen, dtype=torch.float64)
    V = torch.randn(B, H, L, D, generator=gen, dtype=torch.float64)
    q = torch.randn(B, H, T, D, generator=gen, dtype=torch.float64)
    q_pos = torch.tensor([[s + t for t in range(T)] for s in starts])
    k_pool, v_pool, tables = _attention_tests.scatter_into_blocks(K, V, lengths, bs, 20, gen)
    got = p.paged_attention(q, k_pool.double(), v_pool.double(), tables, q_pos)
    mask = (torch.arange(L) <= q_pos[:, :, None])[:, None]
    want = F.scaled_dot_product_attention(q, K, V, attn_mask=mask)
    return got, want


# ---- 6.5 ----------------------------------------------------------------------------------------

HIDDEN_KERNEL_CASES = [
    ["block size 7, head dim 12", 5, 2, 12, 7, [1, 8, 14, 22, 7], float("nan")],
    ["block size 32, long rows", 2, 1, 16, 32, [33, 96], 0.0],
    ["GQA 6 heads on 2, block 7, head dim 12", 2, 6, 12, 7, [9, 20], float("nan"), 2],  # triton_cases: kv_heads last
]


def _report_and_check(mod, results: dict, cases) -> None:
    """Each case's row of an interpreter run (6.5's or 6.9's), reported and checked."""
    for case in cases:
        row = results[case[0]]
        # what the interpreter run measured: the output's shape, no stale (NaN) slot read, and
        # the distance to paged_attention (the reference's is ~1e-7: within 1e-5 of it passes)
        course.answer(f"{case[0]}: shape", row.get("shape"))
        course.answer(f"{case[0]}: finite", row.get("finite"))
        course.answer(f"{case[0]}: max_err", row.get("max_err"), rtol=0.0, atol=1e-5)
        mod.check(row, atol=1e-5)


@pytest.mark.exercise("6.5")
@pytest.mark.skipif(not p.HAS_TRITON, reason="triton is not installed (it installs on Linux x86-64 only)")
def test_kernel_held_out_shapes_in_the_interpreter():
    mod = _load("test_paged_triton")
    _report_and_check(mod, mod.run_interpreted(HIDDEN_KERNEL_CASES), HIDDEN_KERNEL_CASES)


# ---- 6.6 ----------------------------------------------------------------------------------------

@pytest.mark.exercise("6.6")
def test_prefix_hits_with_block_size_7_under_eviction_pressure(model, alone, serve):
    g = torch.Generator().manual_seed(9)
    shared = torch.randint(0, 256, (22,), generator=g).tolist()
    prompts = [tuple(shared + torch.randint(0, 256, (3,), generator=g).tolist()) for _ in range(5)]
    others = [tuple(torch.randint(0, 256, (20,), generator=g).tolist()) for _ in range(3)]
    reqs = [TraceRequest(0.03 * i, pr, 5) for i, pr in enumerate(prompts[:2] + others + prompts[2:])]
    res = serve(lambda c: p.PagedEngine(model, ContinuousBatching(2), block_size=7, num_blocks=12, clock=c),
                Trace(tuple(reqs)))
    course.answer("outputs", [list(r.output) for r in res.requests])
    course.answer("second_request_cached_tokens", int(res.requests[1].num_cached_tokens))
    for r in res.requests:
        assert r.output == alone(r.prompt, 5)[0]
    assert res.requests[1].num_cached_tokens == 21
    res.engine.allocator.check()


# ---- 6.7 ----------------------------------------------------------------------------------------

@pytest.mark.exercise("6.7")
def test_three_sharers_reserve_in_one_call():
    """Rows 0, 1, 2 share a half-full block and all reserve in ONE call: rows 0 and 1 get
    copies, row 2 (the last holder by then) keeps the original; each reads its own writes."""
    c = p.PagedKVCache(1, 3, 1, 16, 2, num_blocks=6, block_size=4)
    c.reserve(torch.tensor([0]), torch.tensor([3]))
    kv = torch.arange(3, dtype=torch.float32)[:, None, None].expand(3, 1, 2).contiguous()
    c.write(0, torch.zeros(3, dtype=torch.long), torch.arange(3), kv, kv)
    c.lengths[0] = 3
    c.fork_row(0, 1)
    c.fork_row(0, 2)
    shared = c.tables[0][0]
    c.reserve(torch.tensor([0, 1, 2]), torch.tensor([4, 4, 4]))
    # block ids as they are: the free queue and `_copy_on_write`'s targets order pin them
    course.answer("shared_before", int(shared))
    course.answer("tables", [[int(b) for b in c.tables[r]] for r in range(3)])
    course.answer("block_tables", c.block_tables[:3, :1])
    course.answer("ref_counts", [int(n) for n in c.allocator.ref_counts])
    assert c.tables[2] == [shared], "the last holder of a shared block keeps it: no copy"
    assert len({c.tables[r][0] for r in range(3)}) == 3 and c.allocator.ref_counts[shared] == 1
    reads = []
    for r in range(3):
        K, _ = c.view(0, torch.tensor([r]), 3)
        reads.append(K[0, 0, :, 0].tolist())
        assert K[0, 0, :, 0].tolist() == [0.0, 1.0, 2.0]
    course.answer("reads", reads)
    c.allocator.check()


@pytest.mark.exercise("6.8")  # parallel sampling, through the PagedEngine
def test_more_forks_than_free_rows(model, alone):
    e = p.PagedEngine(model, ContinuousBatching(2), block_size=4, num_blocks=40)
    sp = SamplingParams(temperature=1.0, top_p=0.9, seed=100)
    kids = e.add_forked(Request(tuple(range(3, 14)), 7, sampling=sp, request_id="f"), 5)
    most = 0
    while e.has_unfinished():
        e.step()
        most = max(most, len(e.scheduler.running))
        assert len(e.scheduler.running) <= 2
    course.answer("outputs", [list(k.output) for k in kids])
    course.answer("finish_reasons", [k.finish_reason for k in kids])
    course.answer("most_running", most)
    course.answer("num_free_after", int(e.allocator.num_free_blocks))
    for k in kids:
        assert k.output == alone(k.prompt, 7, k.sampling)[0]
    assert e.allocator.num_free_blocks == 40


# ---- 6.8 ----------------------------------------------------------------------------------------

@pytest.mark.exercise("6.8")
@pytest.mark.parametrize("bs", [1, 48])
def test_extreme_block_sizes_give_stage_05_tokens(model, serve, contiguous, bs):
    trace = make_trace(10, profile="longtail", rate=100.0, seed=8, short_prompt=(2, 12), short_output=(2, 6),
                       long_output=(6, 20))
    want = contiguous(ContinuousBatching(3, max_tokens_per_step=7), trace)
    res = serve(lambda c: p.PagedEngine(model, ContinuousBatching(3, max_tokens_per_step=7), block_size=bs,
                                        num_blocks=max(3, 70 // bs), clock=c), trace)
    course.answer("outputs", [list(r.output) for r in res.requests])
    course.answer("finish_reasons", [r.finish_reason for r in res.requests])
    assert [r.output for r in res.requests] == want


@pytest.mark.exercise("6.8")
def test_a_llama_on_blocks_of_3_with_a_tight_pool_and_prefix_caching(llama, llama_alone, serve):
    """SmolLM2's architecture in miniature (RoPE, 9 query heads on 3 K/V heads): blocks of 3,
    3 tokens a step, a pool tight enough to preempt, prompts sharing 9 tokens."""
    g = torch.Generator().manual_seed(68)
    shared = torch.randint(0, 257, (9,), generator=g).tolist()
    prompts = [tuple(shared + torch.randint(0, 257, (1 + i % 4,), generator=g).tolist()) for i in range(6)]
    trace = Trace(tuple(TraceRequest(0.02 * i, pr, 12) for i, pr in enumerate(prompts)))
    res = serve(lambda c: p.PagedEngine(llama, ContinuousBatching(3, max_tokens_per_step=3), block_size=3,
                                        num_blocks=14, clock=c), trace)
    course.answer("outputs", [list(r.output) for r in res.requests])
    for r in res.requests:
        assert (r.output, r.finish_reason) == llama_alone(r.prompt, 12), (
            f"request {r.request_id} on the Llama (preempted {r.preemptions} times, {r.num_cached_tokens} prompt "
            f"tokens from the prefix cache) differs from generating it alone")
    assert res.engine.num_preemptions > 0 and res.engine.prefix_hits > 0


@pytest.mark.exercise("6.8")
def test_static_batching_on_paged_memory_never_preempts(model, serve, contiguous):
    trace = make_trace(9, profile="mix", seed=12, short_prompt=(2, 8), long_prompt=(12, 20), short_output=(2, 6),
                       long_output=(6, 12))
    want = contiguous(StaticBatching(3), trace)
    res = serve(lambda c: p.PagedEngine(model, StaticBatching(3), block_size=5, num_blocks=8, clock=c), trace)
    course.answer("outputs", [list(r.output) for r in res.requests])
    course.answer("num_preemptions", int(res.engine.num_preemptions))
    assert [r.output for r in res.requests] == want
    assert res.engine.num_preemptions == 0


# ---- 6.9 ----------------------------------------------------------------------------------------

HIDDEN_SPLIT_CASES = [  # split_cases.py's layout: ..., blocks_per_split, blocks_per_iter, extra table columns
    ["GQA 8 heads on 2, block 7, head dim 12, splits of 3 blocks", 3, 8, 2, 12, 7, [1, 21, 22], float("nan"), 3, 4, 0],
    ["block 32, one block a split and an iteration", 2, 2, 1, 16, 32, [33, 96], 0.0, 1, 1, 0],
    ["the plan's own 2 splits on a wide table, 3 heads on 1", 1, 3, 1, 4, 8, [130], float("nan"), None, None, 20],
]


@pytest.mark.exercise("6.9")
@pytest.mark.skipif(not p.HAS_TRITON, reason="triton is not installed (it installs on Linux x86-64 only)")
def test_split_kernel_held_out_shapes_in_the_interpreter():
    mod = _load("test_paged_triton")
    results = mod.run_interpreted(HIDDEN_SPLIT_CASES, module=_load("split_cases"))
    _report_and_check(mod, results, HIDDEN_SPLIT_CASES)
