"""Exercise 8.2: torch.profiler around real engine steps of a tiny model."""

import json

import pytest

import course

prof = course.load("profiling")
N_LAYER = 2  # the conftest model's depth


@pytest.fixture(scope="module")
def profiled(model, tmp_path_factory):
    engine = prof.decode_engine(model, 3, prompt_len=8)
    before = len(engine.steps)
    trace = tmp_path_factory.mktemp("trace") / "trace.json"
    p = prof.profile_engine(engine, wait=1, warmup=1, active=2, trace_path=trace)
    return p, len(engine.steps) - before, trace


@pytest.mark.exercise("8.2")
def test_runs_wait_plus_warmup_plus_active_steps_and_records_active(profiled):
    p, ran, _ = profiled
    assert ran == 4
    assert p.steps == 2


@pytest.mark.exercise("8.2")
def test_the_summary_names_real_operators_most_self_time_first(profiled):
    p, _, _ = profiled
    names = [o.name for o in p.ops]
    assert {"aten::addmm", "aten::linear"} <= set(names)
    assert all(n.startswith("aten::") for n in names)
    per_step = [o.step_self_s for o in p.ops]
    assert per_step == sorted(per_step, reverse=True) and per_step[0] > 0
    assert all(o.total_s >= o.self_s * 0.999 for o in p.ops)
    # a median over 2 steps is their mean: it lies within the per-step extremes of the sum
    assert all(o.step_self_s <= o.self_s * 1.0001 for o in p.ops)
    assert "aten::addmm" in p.table(20)


@pytest.mark.exercise("8.2")
def test_counts_are_per_recorded_step(profiled):
    """Each decode step runs 4 biased linear layers per block (qkv, attention projection,
    two MLP layers) as aten::addmm, and the bias-free tied head as aten::mm."""
    p, _, _ = profiled
    calls = {o.name: o.calls for o in p.ops}
    assert calls["aten::addmm"] / p.steps == 4 * N_LAYER
    assert calls["aten::mm"] / p.steps == 1
    assert p.ops_per_step > p.top_level_ops_per_step > 4 * N_LAYER
    assert p.kernels_per_step is None  # CPU


@pytest.mark.exercise("8.2")
def test_phase_labels_are_timed(profiled):
    p, _, _ = profiled
    assert set(p.labels) == {"schedule", "forward", "sample", "step"}
    assert all(v > 0 for v in p.labels.values())
    assert all(p.labels[k] <= p.labels["step"] * 1.001 for k in ("schedule", "forward", "sample"))


@pytest.mark.exercise("8.2")
def test_grouped_by_input_shape(profiled):
    p, _, _ = profiled
    addmm = [r for r in p.by_shape if r[0] == "aten::addmm"]
    assert addmm, "no aten::addmm in key_averages(group_by_input_shape=True)"
    assert any("[3, 32]" in shapes for _, shapes, _, _ in addmm)  # 3 decode rows of width 32
    assert sum(c for _, _, c, _ in addmm) == 4 * N_LAYER * p.steps


@pytest.mark.exercise("8.2")
def test_chrome_trace_is_written(profiled):
    p, _, trace = profiled
    assert p.trace_path == str(trace)
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    assert {"forward", "schedule", "sample"} <= names
    assert any(str(n).startswith("aten::addmm") for n in names)


@pytest.mark.exercise("8.2")
def test_an_engine_that_runs_dry_is_an_error(model):
    engine = prof.decode_engine(model, 1, prompt_len=8, max_new_tokens=3)
    with pytest.raises(ValueError, match="ran out of work"):
        prof.profile_engine(engine, wait=1, warmup=1, active=3)


@pytest.mark.given
def test_labels_wrap_without_changing_the_engine(model):
    engine = prof.decode_engine(model, 2, prompt_len=8)
    prof.label_engine(engine)
    prof.label_engine(engine)  # idempotent
    out = engine.step()
    assert out.ran and len(out.tokens) == 2


@pytest.mark.given
@pytest.mark.parametrize("kw", [dict(active=0), dict(wait=-1), dict(warmup=1.5)])
def test_bad_schedule_is_refused(model, kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        prof.profile_engine(prof.decode_engine(model, 1, prompt_len=8), **kw)
