"""Shared fixtures of stage 05's tests.

- `model`: `solutions.gpt.random_gpt` (2 layers, 2 heads, width 32, context 48) in float64.
  Its matrices are drawn with std 0.5 instead of GPT-2's 0.02: with the default init a tiny
  model repeats one token whatever the context, which would hide a request reading the
  wrong cache row or position. In float64 its top logits are ~1e-2 apart and batching
  changes them by ~1e-15, so "batched == alone" can be checked exactly.
- `alone`: the oracle — stage 04's `generate` on one prompt at a time (`generate_alone`).
- `llama`, `llama_alone`: the same for SmolLM2's architecture in miniature (issue 30): a random
  `Llama` (RoPE; 9 query heads over 3 K/V heads, SmolLM2's ratio, of head dim 4; 2 layers,
  width 36, context 48) in float64, matrices drawn with std 0.3 for the same reason.
- `checked`: wraps an engine so that every step is followed by `check_invariants`.
- `serve_trace`: replay a trace on a `ManualClock` (deterministic), invariants checked.

Every test module runs torch on one thread (restored afterwards): the tensors here are tiny,
and a second thread only adds synchronisation, or worse, on a busy machine.
"""

from __future__ import annotations

from functools import lru_cache, partial

import pytest
import torch

import course
from solutions.gpt import GPT, random_gpt
from solutions.kv_cache import generate_alone

CONTEXT = 48


@pytest.fixture(scope="module", autouse=True)
def _single_threaded(one_thread):
    """Every test module here runs on one torch thread (the course plugin's `one_thread`)."""


@pytest.fixture(scope="session")
def model() -> GPT:
    return random_gpt(CONTEXT, dtype=torch.float64)


@pytest.fixture(scope="session")
def alone(model):
    """alone(prompt: tuple, n, sampling=None, stop=()) -> (tokens, finish reason), generated
    alone (`generate_alone`, cached)."""
    return lru_cache(maxsize=None)(partial(generate_alone, model))


@pytest.fixture(scope="session")
def llama():
    """A random Llama shaped as SmolLM2 in miniature (see the module docstring). `random_llama`
    seeds torch's global generator: its state is put back, so a test's draws do not depend on
    whether this fixture ran first."""
    from solutions.train import random_llama

    state = torch.random.get_rng_state()
    try:
        return random_llama(vocab_size=257, std=0.3, dtype=torch.float64, dim=36, n_heads=9, n_kv_heads=3,
                            hidden_dim=48, max_seq_len=CONTEXT)
    finally:
        torch.random.set_rng_state(state)


@pytest.fixture(scope="session")
def llama_alone(llama):
    """`alone` for `llama`."""
    return lru_cache(maxsize=None)(partial(generate_alone, llama))


def check_invariants(engine) -> None:
    """What must hold between any two steps, whatever the policy."""
    b = course.load("batching")
    sched, cache = engine.scheduler, engine.cache
    running, waiting = sched.running, sched.waiting
    assert len(running) <= sched.max_batch_size
    assert int(cache.lengths.sum()) <= sched.max_cache_tokens, "the cache holds more than its capacity"
    slots = [r.slot for r in running]
    assert None not in slots and len(set(slots)) == len(slots), f"rows shared or missing: {slots}"
    dead = [r.slot for r in engine.dead_rows]  # a fixed-shape static batch's finished rows
    assert sorted(slots + dead + engine.free_slots) == list(range(sched.max_batch_size)), "a cache row leaked"
    if dead:
        assert sched.fixed_shape and running, "dead rows outlived their batch"
    for r in running:
        assert r.state is b.State.RUNNING
        assert int(cache.lengths[r.slot]) == r.num_computed, f"{r}: cache row length != num_computed"
    for slot in engine.free_slots:
        assert int(cache.lengths[slot]) == 0, f"free row {slot} still holds tokens"
    for r in waiting:
        assert r.state is b.State.WAITING and r.slot is None and r.num_computed == 0
    assert [r.order for r in waiting] == sorted(r.order for r in waiting), (
        f"the waiting queue must stay in Request.order (priority, then arrival; a preempted request goes back to "
        f"its old place): got {[r.request_id for r in waiting]}")
    for r in engine.requests.values():
        if r.state is b.State.FINISHED:
            assert r.slot is None and r not in running and r not in waiting


@pytest.fixture
def checked():
    def wrap(engine):
        inner = engine.step

        def step():
            out = inner()
            check_invariants(engine)
            return out

        engine.step = step
        return engine

    return wrap


@pytest.fixture
def serve_trace(model, checked):
    """serve_trace(scheduler, trace, step_time=0.01, **replay_kw) -> RunResult (ManualClock)."""
    b = course.load("batching")

    def run(scheduler, trace, step_time: float = 0.01, **kw):
        clock = b.ManualClock()
        engine = checked(b.Engine(model, scheduler, clock=clock))
        result = b.replay(engine, trace, sleep=clock.sleep, step_time=step_time, **kw)
        assert not engine.has_unfinished()
        result.engine = engine
        return result

    return run


@pytest.fixture
def assert_alone(alone):
    """Every request of a run produced exactly what it produces generated alone."""

    def check(result, sampling=None):
        for r in result.requests:
            tokens, reason = alone(r.prompt, r.max_new_tokens, sampling, tuple(sorted(r.stop)))
            assert r.output == tokens, f"request {r.request_id} (prompt {len(r.prompt)}): batched output differs"
            assert r.finish_reason == reason

    return check
