"""Exercise 8.3: memory accounting from tensor sizes, checked against sum(numel × element_size)
and against what the allocator / the profiler's memory events report."""

import pytest
import torch

import course
from solutions.batching import Engine
from solutions.kv_cache import KVCache, QuantizedKVCache
from solutions.paged import PagedEngine

prof = course.load("profiling")


def by_hand(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.exercise("8.3")
def test_model_bytes_are_its_parameters_once(model):
    assert prof.nbytes(model) == by_hand(*model.parameters(), *model.buffers())
    # the head is tied to the embedding: one storage, counted once
    w = model.transformer.wte.weight
    assert prof.nbytes(model.lm_head.weight, w) == by_hand(w)


@pytest.mark.exercise("8.3")
def test_views_share_their_storage():
    x = torch.zeros(10, 6)
    assert prof.nbytes(x, x[:3], x[1], x.view(-1), x.t()) == by_hand(x), \
        "tensors that share a storage (views: x[1] starts elsewhere in it) count it once"
    assert prof.nbytes([x, torch.ones(4, dtype=torch.float16)], {"a": torch.ones(3, dtype=torch.int8)}) == \
        240 + 8 + 3


@pytest.mark.exercise("8.3")
@pytest.mark.parametrize("cls", [KVCache, QuantizedKVCache])
def test_cache_bytes_are_its_buffers(model, cls):
    cache = cls.for_model(model, 3, max_len=40)
    tensors = [t for t in vars(cache).values() if isinstance(t, torch.Tensor)]
    assert prof.nbytes(cache) == by_hand(*tensors)
    assert prof.kv_pool_bytes(cache) == by_hand(*tensors)


@pytest.mark.exercise("8.3")
def test_peak_memory_of_known_allocations():
    n = 1 << 16

    def work():
        a = torch.ones(n)
        b = torch.ones(n)
        del a, b
        return torch.ones(n)  # peak: two buffers live at once

    peak = prof.peak_step_memory(work)
    assert 2 * 4 * n <= peak <= 2 * 4 * n + 4096


@pytest.mark.exercise("8.3")
def test_breakdown_of_a_real_engine(model):
    engine = prof.decode_engine(model, 4, prompt_len=8, engine_cls=Engine)  # stage 05's contiguous cache
    mb = prof.memory_breakdown(model, engine)
    assert mb.params == by_hand(*model.parameters())
    assert mb.kv_pool == by_hand(engine.cache.k, engine.cache.v, engine.cache.lengths)
    assert mb.activations > 0 and mb.python_state > 0
    assert mb.allocator is None and mb.process > mb.params + mb.kv_pool  # RSS holds at least these
    assert mb.kv_share == pytest.approx(mb.kv_pool / mb.total)


@pytest.mark.exercise("8.3")
def test_breakdown_of_the_paged_engine(model):
    """Stage 06's pool states its bytes (its K and V block pools): that is what is counted."""
    engine = prof.decode_engine(model, 2, prompt_len=8, engine_cls=PagedEngine)
    mb = prof.memory_breakdown(model, engine)
    assert mb.kv_pool == engine.cache.nbytes == by_hand(engine.cache.k, engine.cache.v)
    assert mb.params == prof.nbytes(model) and mb.activations > 0


@pytest.mark.given
def test_a_cache_that_states_its_bytes():
    class Pool:
        nbytes = 12345

    assert prof.kv_pool_bytes(Pool()) == 12345


@pytest.mark.exercise("8.3")
def test_a_view_alone_counts_its_whole_storage():
    x = torch.zeros(10, 6)
    assert prof.nbytes(x[:3]) == by_hand(x), \
        "nbytes counts a storage at its full size (untyped_storage().nbytes()), even when only a view is passed"
    assert prof.nbytes(x[2]) == prof.nbytes(x) == 240


@pytest.mark.exercise("8.3")
def test_a_module_counts_its_buffers_too():
    norm = torch.nn.BatchNorm1d(5)  # 2 parameters, 3 buffers (running mean, var, batch count)
    want = by_hand(*norm.parameters(), *norm.buffers())
    assert prof.nbytes(norm) == want, f"a module's nbytes counts its parameters AND buffers: {want} bytes"
    holder = type("Holder", (), {})()
    holder.layers = [torch.ones(3), torch.ones(2)]
    holder.scale = torch.ones(1, dtype=torch.float64)
    assert prof.nbytes(holder) == 12 + 8 + 8, "an object's tensor attributes and lists of tensors are counted"


class CountingStep:
    """Wraps an engine's step, counting the calls; `fail` makes the step raise."""

    def __init__(self, engine, fail=False):
        self.engine, self.calls, self.fail = engine, 0, fail
        self.inner = engine.step
        engine.step = self

    def __call__(self):
        self.calls += 1
        if self.fail:
            raise RuntimeError("a step that fails")
        return self.inner()


@pytest.mark.exercise("8.3")
def test_breakdown_runs_one_step_and_leaves_tracemalloc_off(model):
    import tracemalloc

    engine = prof.decode_engine(model, 2, prompt_len=8, engine_cls=Engine)
    step = CountingStep(engine)
    bad = prof.decode_engine(model, 1, prompt_len=8, engine_cls=Engine)
    CountingStep(bad, fail=True)

    def tracing() -> bool:  # and stop it, so that a failure here does not slow down every later test
        on = tracemalloc.is_tracing()
        tracemalloc.stop()
        return on

    prof.memory_breakdown(model, engine)
    assert step.calls == 1, f"memory_breakdown runs exactly ONE engine.step(), ran {step.calls}"
    assert not tracing(), "tracemalloc must not be running after memory_breakdown"
    with pytest.raises(RuntimeError, match="a step that fails"):
        prof.memory_breakdown(model, bad)
    assert not tracing(), "tracemalloc must be stopped even when the step raises (try / finally)"
