"""Exercise 8.2: torch.profiler around real engine steps of a tiny model."""

import json
import types

import pytest
import torch

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


class CountingEngine:
    """A stand-in engine whose steps are known exactly: step k (from 0) runs k + 1
    `aten::mul` and one `aten::bmm` in its forward, `aten::add` in its sample, and step 2 —
    the first recorded step with wait=1, warmup=1 — also one large `aten::mm`."""

    device = torch.device("cpu")

    def __init__(self):
        self.k = 0
        self.scheduler = types.SimpleNamespace(schedule=lambda: None)
        self.x = torch.ones(4)
        # sizes with margins: the bmm takes several times the Python around it inside the
        # "forward" label (so a label's self time cannot pass for its total), and the mm
        # several times the whole label (so a mean over the steps cannot pass for the median)
        self.b = torch.randn(1, 256, 256)
        self.a = torch.randn(640, 640)

    def _forward(self):
        for _ in range(self.k + 1):
            torch.mul(self.x, self.x)
        torch.bmm(self.b, self.b)
        if self.k == 2:
            torch.mm(self.a, self.a)

    def _sample(self):
        return torch.add(self.x, self.x)

    def step(self):
        self.scheduler.schedule()
        self._forward()
        self._sample()
        self.k += 1
        return types.SimpleNamespace(ran=True)


@pytest.fixture(scope="module")
def counted():
    engine = CountingEngine()
    return prof.profile_engine(engine, wait=1, warmup=1, active=3), engine


@pytest.mark.exercise("8.2")
def test_only_the_active_steps_are_counted(counted):
    p, engine = counted
    assert engine.k == 5, f"profile_engine must run wait + warmup + active = 5 steps, ran {engine.k}"
    calls = {o.name: o.calls for o in p.ops}
    assert calls.get("aten::mul") == 3 + 4 + 5, (
        "calls must count the active (recorded) steps only — steps 2, 3, 4 run 3 + 4 + 5 aten::mul; "
        f"got {calls.get('aten::mul')}")
    assert calls.get("aten::add") == 3 and calls.get("aten::mm") == 1


@pytest.mark.exercise("8.2")
def test_step_self_time_is_the_median_over_the_steps(counted):
    """aten::mm ran in one of the three recorded steps: its self time in a step is 0, 0 and
    a lot, so the median is 0 — and it sorts below aten::mul, which runs in every step."""
    p, _ = counted
    ops = {o.name: o for o in p.ops}
    mm = ops["aten::mm"]
    assert mm.self_s > 0
    assert mm.step_self_s == 0.0, ("step_self_s must be the MEDIAN over the recorded steps of the op's self "
                                   "time in each step (0 in a step that did not call it), not self_s / steps; "
                                   f"got {mm.step_self_s} for an op that ran in 1 of 3 steps")
    names = [o.name for o in p.ops]
    assert names.index("aten::mul") < names.index("aten::mm"), \
        f"ops must be sorted by step_self_s, largest first; got {names}"


@pytest.mark.exercise("8.2")
def test_top_level_ops_are_those_not_called_by_an_aten_op(counted):
    """mul, bmm, add and mm are called from Python (inside the labels' record_function
    ranges, which are not aten ops); bmm and mm call aten::resolve_conj themselves."""
    p, _ = counted
    assert p.top_level_ops_per_step == pytest.approx((12 + 3 + 3 + 1) / 3), (
        "top_level_ops_per_step counts the aten events whose parent is not an aten op (none, or a "
        f"label): here 19 over 3 steps; got {p.top_level_ops_per_step * 3:.0f} over 3")
    assert p.ops_per_step > p.top_level_ops_per_step, "ops_per_step counts the nested aten calls too"


@pytest.mark.exercise("8.2")
def test_a_label_is_the_total_time_of_its_phase(counted):
    p, _ = counted
    ops = {o.name: o for o in p.ops}
    assert p.labels["forward"] >= ops["aten::bmm"].step_self_s, (
        "labels['forward'] must be the phase's TOTAL time (the ops inside it included), not the "
        "record_function's self time")
    assert p.labels["forward"] < ops["aten::mm"].self_s / 3, (
        "labels are medians over the steps, not means: the one step with the large aten::mm must not "
        "move labels['forward']")
