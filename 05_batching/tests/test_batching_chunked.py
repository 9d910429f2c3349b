"""Exercise 5.5: chunked prefill — a per-step token budget, decodes first, prompts in chunks."""

from __future__ import annotations

import pytest
import torch

import course
from solutions.workload import Trace, TraceRequest, make_trace

b = course.load("batching")
pytestmark = pytest.mark.exercise("5.5")

MIXED = dict(short_prompt=(2, 6), long_prompt=(24, 36), short_output=(2, 6), long_output=(8, 12))


@pytest.mark.parametrize("budget", [4, 5, 9, 64])
def test_chunked_prefill_matches_generating_alone(serve_trace, assert_alone, budget):
    tr = make_trace(10, profile="mix", seed=7, **MIXED)
    result = serve_trace(b.ContinuousBatching(4, max_tokens_per_step=budget), tr)
    assert_alone(result)
    for s in result.steps:
        assert s.decode_rows + s.prefill_tokens <= budget, "a step ran more tokens than the budget"


def test_a_long_prompt_is_split_and_never_stalls_the_decodes(serve_trace, assert_alone):
    decoders = [TraceRequest(0.0, (i + 1, 2, 3), 12) for i in range(3)]
    long = TraceRequest(0.03, tuple(range(1, 36)), 2)          # arrives while the others decode
    result = serve_trace(b.ContinuousBatching(4, max_tokens_per_step=8), Trace(tuple(decoders + [long])),
                         step_time=0.01)
    assert_alone(result)
    for r in result.requests[:3]:
        gaps = [round(t1 - t0, 9) for t0, t1 in zip(r.token_times, r.token_times[1:])]
        assert set(gaps) == {0.01}, f"a decode was skipped in some step: gaps {gaps}"
    chunks = [s.prefill_tokens for s in result.steps if s.prefill_tokens and s.decode_rows == 3]
    assert chunks and max(chunks) <= 8 - 3, "prompt chunks get what the decodes leave of the budget"
    r = result.requests[3]
    steps_to_first = round((r.token_times[0] - r.events[1].time) / 0.01)
    assert steps_to_first >= 35 // 5 - 1, "the 35-token prompt should have taken several chunked steps"


def test_chunks_fill_the_cache_exactly_like_one_prefill(model):
    prompt = list(range(3, 33))
    caches = []
    for budget in (None, 3, 7):
        engine = b.Engine(model, b.ContinuousBatching(2, max_tokens_per_step=budget), clock=b.ManualClock())
        r = engine.add_request(b.Request(prompt, 3))
        steps = 0
        while not r.output:
            engine.step()
            steps += 1
        want = 1 if budget is None else -(-len(prompt) // budget)
        assert steps == want, (
            f"a {len(prompt)}-token prompt alone with a budget of {budget} tokens a step took {steps} steps to "
            f"its first token, expected {want}: each step spends the whole budget (n = min(pending, what is "
            f"left), the budget itself when nothing else runs), so the prompt goes in ceil({len(prompt)} / "
            f"{budget}) chunks")
        caches.append((r.output[0], engine.cache.k[:, r.slot, :, :30].clone(), engine.cache.v[:, r.slot, :, :30].clone()))
    for first, k, v in caches[1:]:
        assert first == caches[0][0]
        torch.testing.assert_close(k, caches[0][1], rtol=0, atol=1e-12)  # float64: only rounding
        torch.testing.assert_close(v, caches[0][2], rtol=0, atol=1e-12)


def test_decodes_come_before_prompt_chunks(model):
    engine = b.Engine(model, b.ContinuousBatching(3, max_tokens_per_step=3), clock=b.ManualClock())
    a = engine.add_request(b.Request([1, 2], 6))
    engine.step()                                        # a: prefill, first token
    c = engine.add_request(b.Request(list(range(1, 21)), 2))
    d = engine.add_request(b.Request(list(range(5, 25)), 2))
    plan = engine.scheduler.schedule(engine.clock())
    for r in plan.admitted:
        engine._acquire(r)
    got = [("a" if r is a else "c" if r is c else "d" if r is d else "?", n) for r, n in plan.chunks]
    assert got == [("a", 1), ("c", 2)], (
        f"budget 3: one token for the decode a, the 2 left to the oldest prompt c, and d, which gets 0, left out "
        f"of the plan: got {got}")
    assert d.state is b.State.RUNNING and d.num_computed == 0
