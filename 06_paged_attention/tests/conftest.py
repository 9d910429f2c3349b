"""Shared fixtures of stage 06's tests.

- `model`: `solutions.gpt.random_gpt` (2 layers, 2 heads, width 32, context 48) in float64,
  its matrices drawn with std 0.5 (with GPT-2's 0.02 a tiny model repeats one token whatever
  the context, which would hide a wrong block or position). In float64 its top logits are
  far apart next to what paging changes (~1e-15), so outputs are compared exactly.
- `alone`: the oracle — stage 04's `generate` on one prompt at a time (`generate_alone`).
- `llama`, `llama_alone`: the same for SmolLM2's architecture in miniature (issue 30): a random
  `Llama` (RoPE; 9 query heads over 3 K/V heads, SmolLM2's ratio, of head dim 4; 2 layers,
  width 36, context 48) in float64, matrices drawn with std 0.3 (stage 05's conftest's twin).
- `contiguous`: the other oracle — stage 05's `Engine` on the same trace.
- `chunked_forward(model, cache, seqs, chunks)`: stage 04's forward_cached in ragged chunks,
  next to the full forward (the oracle).
- `check_paged(engine)`: what must hold between any two steps of a `PagedEngine`.
- `serve(make_engine, trace)`: replay a trace on a ManualClock, invariants after every step.

Every test module runs torch on one thread (restored afterwards).
"""

from __future__ import annotations

from functools import lru_cache, partial

import pytest
import torch

import course
from solutions.batching import Engine, ManualClock, replay
from solutions.gpt import GPT, random_gpt
from solutions.kv_cache import forward_cached, generate_alone

CONTEXT = 48


def pytest_collection_finish(session):
    """Start the interpreter runs of exercises 6.5 and 6.9 (a fresh process each) as soon
    as the tests are collected, for each module with a selected case: see `SharedRun` in
    test_paged_triton.py."""
    started = set()
    for item in session.items:
        module = getattr(item, "module", None)
        start = getattr(module, "start_interpreted_early", None)
        if start is not None and module not in started and "interpreted" in getattr(item, "fixturenames", ()):
            started.add(module)
            start()


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


def _chunked_forward(model, cache, seqs: torch.Tensor, chunks):
    """Feed `seqs` (B, T) through stage 04's `forward_cached` on `cache` in ragged chunks
    (one list of B new-token counts per call; 0: the row sits that call out). Yields, per
    call and row, (row, the logits of its new tokens, the model's full-forward logits at
    the same positions): the caller asserts they agree."""
    full = model(seqs)
    done = [0] * len(seqs)
    for chunk in chunks:
        idx = torch.zeros(len(seqs), max(chunk), dtype=torch.long)
        for b, k in enumerate(chunk):
            idx[b, :k] = seqs[b, done[b]:done[b] + k]
        logits = forward_cached(model, idx, cache, n_new=torch.tensor(chunk))
        for b, k in enumerate(chunk):
            yield b, logits[b, :k], full[b, done[b]:done[b] + k]
            done[b] += k


@pytest.fixture(scope="session")
def chunked_forward():
    """`_chunked_forward` for the tests (a conftest's functions reach tests as fixtures)."""
    return _chunked_forward


def check_paged(engine) -> None:
    """Invariants of a PagedEngine between steps: reference counts equal the block tables
    that hold each block, no block leaked, waste below one block per row, rows and
    lengths consistent with the requests."""
    p = course.load("paged")
    b_mod = course.load("batching", impl="solution")  # noqa: F841 - the engine's own module
    cache, alloc, sched = engine.cache, engine.allocator, engine.scheduler
    alloc.check()
    holders = [r for r in sched.running] + list(engine.dead_rows)
    slots = [r.slot for r in holders]
    assert None not in slots and len(set(slots)) == len(slots), f"rows shared or missing: {slots}"
    assert sorted(slots + engine.free_slots) == list(range(cache.batch)), "a cache row leaked"
    counts = [0] * alloc.num_blocks
    for r in range(cache.batch):
        for blk in cache.tables[r]:
            counts[blk] += 1
    assert counts == alloc.ref_counts, "reference counts differ from the block tables holding each block"
    for slot in engine.free_slots:
        assert cache.tables[slot] == [] and int(cache.lengths[slot]) == 0, f"free row {slot} still holds blocks"
    bs = cache.block_size
    for r in sched.running:
        n = int(cache.lengths[r.slot])
        assert n == r.num_computed, f"{r}: cache length {n} != num_computed {r.num_computed}"
        assert len(cache.tables[r.slot]) == p.blocks_needed(n, bs), \
            f"{r}: {len(cache.tables[r.slot])} blocks for {n} tokens of block size {bs}"
        assert cache.block_tables[r.slot, :len(cache.tables[r.slot])].tolist() == cache.tables[r.slot]
    for r in sched.waiting:
        assert r.slot is None and r.num_computed == 0
    assert 0.0 <= engine.kv_usage() <= 1.0
    assert alloc.num_free_blocks + sum(c > 0 for c in counts) == alloc.num_blocks


def checked(engine):
    inner = engine.step

    def step():
        out = inner()
        check_paged(engine)
        return out

    engine.step = step
    return engine


@pytest.fixture(scope="session")
def serve():
    """serve(make_engine, trace, **replay_kw) -> RunResult; make_engine(clock) -> engine.
    Paged engines get their invariants checked after every step."""

    def run(make_engine, trace, step_time: float = 0.01, **kw):
        clock = ManualClock()
        engine = make_engine(clock)
        if hasattr(engine, "allocator"):
            checked(engine)
        result = replay(engine, trace, sleep=clock.sleep, step_time=step_time, **kw)
        assert not engine.has_unfinished()
        result.engine = engine
        if hasattr(engine, "allocator"):  # everything finished: every block is free again
            assert engine.allocator.num_free_blocks == engine.allocator.num_blocks, "blocks leaked"
        return result

    return run


@pytest.fixture(scope="session")
def contiguous(model, serve):
    """contiguous(scheduler, trace) -> outputs of stage 05's Engine (the oracle)."""

    def run(scheduler, trace):
        res = serve(lambda c: Engine(model, scheduler, clock=c), trace)
        return [r.output for r in res.requests]

    return run
