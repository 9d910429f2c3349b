"""Stage 05's engine on SmolLM2's architecture (issue 30): a tiny random Llama (conftest's
`llama`: RoPE, 9 query heads sharing 3 K/V heads, float64), batched with chunked prefill,
preemption and a fixed-shape static batch, gets request for request the tokens it gets
generated alone (stage 04's `generate`, `llama_alone`).

Nothing in stage 05's exercises names the model: stage 04's `forward_cached` rotates each
token's q and k at the token's absolute position (its cache row's length plus its index in
the chunk) and lets the query heads share the K/V heads; the engine hands it rows and chunks.
What changes with a Llama is how a mistake shows: a chunk, a resumed request or a finished
row of a static batch run at the wrong position has no position embedding to betray it, only
the rotation, and the cache rows hold the 3 K/V heads, not the 9 query heads.
"""

from __future__ import annotations

import pytest

import course
from solutions.workload import make_trace

b = course.load("batching")

LONG = dict(short_prompt=(2, 8), short_output=(10, 20), long_output=(10, 20))


def serve(model, checked, scheduler, trace):
    """Replay `trace` on a ManualClock, invariants checked after every step: (engine, result)."""
    clock = b.ManualClock()
    engine = checked(b.Engine(model, scheduler, clock=clock))
    result = b.replay(engine, trace, sleep=clock.sleep, step_time=0.01)
    assert not engine.has_unfinished()
    return engine, result


def assert_as_alone(result, alone, why: str) -> None:
    for r in result.requests:
        tokens, reason = alone(r.prompt, r.max_new_tokens)
        assert (r.output, r.finish_reason) == (tokens, reason), (
            f"request {r.request_id} (prompt of {len(r.prompt)} tokens, {r.max_new_tokens} new, preempted "
            f"{r.preemptions} times) got {r.output} ({r.finish_reason}) on the Llama, {tokens} ({reason}) generated "
            f"alone: {why}")


@pytest.mark.exercise("5.6")
def test_a_llama_chunked_and_preempted_generates_as_alone(llama, llama_alone, checked):
    tr = make_trace(8, profile="uniform", seed=0, **LONG)
    budget = 5
    engine, result = serve(llama, checked, b.ContinuousBatching(4, max_cache_tokens=tr.max_total_len + 12,
                                                                max_tokens_per_step=budget), tr)
    assert engine.cache.k.shape[2] == 3, (
        f"the engine's cache holds {engine.cache.k.shape[2]} heads a token: a Llama's cache holds its K/V heads "
        f"(kv_heads(model) = 3), not its 9 query heads")
    assert sum(r.preemptions for r in result.requests) > 0, "this trace must preempt"
    prefilled = sum(s.prefill_tokens for s in result.steps)
    assert prefilled > sum(len(r.prompt) for r in result.requests), "a preempted request must be recomputed"
    assert max(s.decode_rows + s.prefill_tokens for s in result.steps) <= budget
    assert_as_alone(result, llama_alone,
                    "a resumed request recomputes prompt + output from position 0, in chunks of at most "
                    f"{budget} tokens, each token at its own position (RoPE rotates q and k there)")


@pytest.mark.exercise("5.2")
def test_a_llama_in_a_fixed_shape_static_batch_generates_as_alone(llama, llama_alone, checked):
    """Rows that finish early stay in the batch as dead rows, recomputing their last position."""
    tr = make_trace(6, profile="mix", seed=3, short_prompt=(2, 6), long_prompt=(12, 20), short_output=(2, 4),
                    long_output=(9, 14))
    engine, result = serve(llama, checked, b.StaticBatching(3), tr)
    assert any(s.dead_rows for s in result.steps), "this trace must leave finished rows in a running batch"
    assert_as_alone(result, llama_alone,
                    "each row of a ragged batch continues its own sequence at its own positions, whatever the "
                    "other rows' lengths")
