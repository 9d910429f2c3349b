"""Exercise 6.8 on SmolLM2's architecture (issue 30): the `PagedEngine` serving a tiny random
Llama (conftest's `llama`: RoPE, 9 query heads sharing 3 K/V heads, float64) gets request for
request the tokens it gets generated alone (`llama_alone`, stage 04's `generate`) and those of
stage 05's contiguous engine: with chunked prefill, a pool so small that requests are
preempted and recomputed, and prefix caching of a shared prompt (the chat template's system
prompt, in miniature), which must hit without changing a token.

The pools hold the K/V heads (3), not the query heads; attention reads them through 6.4's
`paged_attention` (prefill chunks) and the decode staging copy (a run of decode steps), each
query head h reading K/V head h // 3.
"""

from __future__ import annotations

import pytest
import torch

import course
from solutions.batching import ContinuousBatching
from solutions.workload import Trace, TraceRequest, make_trace

p = course.load("paged")

pytestmark = pytest.mark.exercise("6.8")


def assert_as_alone(result, alone, why: str) -> None:
    for r in result.requests:
        tokens, reason = alone(r.prompt, r.max_new_tokens)
        assert (r.output, r.finish_reason) == (tokens, reason), (
            f"request {r.request_id} (prompt of {len(r.prompt)} tokens, {r.max_new_tokens} new, preempted "
            f"{r.preemptions} times, {r.num_cached_tokens} prompt tokens from the prefix cache) got {r.output} on "
            f"the Llama, {tokens} generated alone: {why}")


def test_a_llama_chunked_and_preempted_generates_as_alone(llama, llama_alone, serve):
    trace = make_trace(8, profile="uniform", seed=0, short_prompt=(2, 8), short_output=(10, 20),
                       long_output=(10, 20))
    budget = 5
    res = serve(lambda c: p.PagedEngine(llama, ContinuousBatching(4, max_tokens_per_step=budget), block_size=4,
                                        num_blocks=16, clock=c), trace)
    e = res.engine
    assert tuple(e.cache.k.shape[3:]) == (3, 4), (
        f"the pools are {tuple(e.cache.k.shape)}: a Llama's hold its 3 K/V heads of 4 a token, not its 9 query heads")
    assert e.num_preemptions > 0, "this pool must preempt"
    assert max(s.decode_rows + s.prefill_tokens for s in e.steps) <= budget
    assert_as_alone(res, llama_alone,
                    "a resumed request recomputes prompt + output in chunks of at most 5 tokens, each token "
                    "rotated at its own position, and each query head reads K/V head h // 3 of its own blocks")


def test_a_shared_system_prompt_hits_the_prefix_cache_and_changes_no_token(llama, llama_alone, serve):
    """A 22-token shared prefix (5 full blocks of 4, 20 tokens, can hit) then a short question
    of each request's own; the first request finishes its prefill before the others arrive,
    so each later one starts from its 5 cached blocks. Long enough answers that a run of
    decode steps is served by the staging copy (grouped-query heads there too)."""
    g = torch.Generator().manual_seed(30)
    system = torch.randint(0, 257, (22,), generator=g).tolist()
    prompts = [tuple(system + torch.randint(0, 257, (2 + i % 3,), generator=g).tolist()) for i in range(5)]
    trace = Trace(tuple(TraceRequest(0.0 if i == 0 else 0.05, pr, 10) for i, pr in enumerate(prompts)))
    res = serve(lambda c: p.PagedEngine(llama, ContinuousBatching(4), block_size=4, num_blocks=40, clock=c), trace)
    e = res.engine
    assert_as_alone(res, llama_alone, "a prompt block taken from the prefix cache holds the K/V (rotated at the "
                                      "same positions) that computing it would have written")
    assert [r.num_cached_tokens for r in res.requests] == [0] + [20] * 4, (
        f"cached prompt tokens per request {[r.num_cached_tokens for r in res.requests]}: the first computes its "
        f"whole prompt, each later one finds the shared prefix's 5 full blocks (20 tokens)")
    assert e.prefix_hits == 80
    assert e.cache.staging.steps_staged > 0, "the decode staging copy never served a step: make the answers longer"
