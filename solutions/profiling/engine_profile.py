"""torch.profiler around engine steps (8.2): labels, a schedule, per-step operator counts."""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from solutions.checks import check_int, check_ints

from .timers import synchronize


def profile_engine(engine, *, wait: int = 1, warmup: int = 1, active: int = 3, trace_path: str | Path | None = None,
                   record_shapes: bool = True) -> EngineProfile:
    """Profile `wait + warmup + active` calls of `engine.step()` with `torch.profiler` and
    return an `EngineProfile` of the `active` (recorded) steps; every field's meaning and
    counting rule is in EngineProfile's docstring.

    The steps are labelled as `label_engine` labels them ("schedule", "forward", "sample").
    Only the last `active` steps are recorded: the profiler's schedule skips the first `wait`
    steps and traces the next `warmup` without keeping them, once (no second cycle);
    `record_shapes` as given; activities: CPU, plus CUDA when `engine.device` is a GPU, whose
    work must land in the step that queued it. The Chrome trace goes to `trace_path` when
    given. Raises ValueError (ints: wait >= 0, warmup >= 0, active >= 1), and ValueError
    "the engine ran out of work at step i of n" when a step has nothing to run
    (`engine.step().ran` is False).
    """
    check_ints(0, wait=wait, warmup=warmup)
    check_int("active", active, 1)
    _warm_profiler()
    # BEGIN SOLUTION 8.2
    # DECISION: which profiler output answers which field (the summed `key_averages()` for totals,
    #   the event list split into steps for medians), how an event is assigned to a step (the step
    #   whose range holds its start), and what counts as a top-level operator (parent not an aten
    #   op).
    # HINT: Run the steps inside `with profile(activities=..., schedule=schedule(wait=...,
    #   warmup=..., active=..., repeat=1), record_shapes=...) as prof:`, calling `prof.step()`
    #   after every engine step (and synchronize(engine.device) before it, so GPU work lands in
    #   its own step).
    # HINT: After the run, `prof.key_averages()` gives the per-operator sums (count,
    #   self_cpu_time_total, cpu_time_total in µs); keep the keys starting "aten::".
    # HINT: For per-step figures use `prof.events()` (CPU events only): in torch 2.13 each recorded
    #   step is one event named "ProfilerStep*" (the Chrome trace calls them "ProfilerStep#k");
    #   match the prefix "ProfilerStep". Their ranges are the steps; put every other event into the
    #   step whose range holds its start (bisect on the sorted starts) and take medians over the
    #   steps.
    # HINT: Top-level operators: aten events whose `cpu_parent` is None or not an aten op. by_shape
    #   comes from `prof.key_averages(group_by_input_shape=True)`, str(a.input_shapes).
    label_engine(engine)
    device = engine.device
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sched = schedule(wait=wait, warmup=warmup, active=active, repeat=1)
    with profile(activities=activities, schedule=sched, record_shapes=record_shapes) as prof:
        for i in range(wait + warmup + active):
            if not engine.step().ran:
                raise ValueError(f"the engine ran out of work at step {i} of {wait + warmup + active}")
            synchronize(device)
            prof.step()
    averages = prof.key_averages()
    cpu = torch.autograd.DeviceType.CPU  # on CUDA, labels are mirrored on the GPU timeline too: skip those
    everything = [e for e in prof.events() if getattr(e, "device_type", cpu) == cpu]
    steps = sorted((e.time_range.start, e.time_range.end) for e in everything if e.name.startswith("ProfilerStep"))
    starts = [s for s, _ in steps]
    per_step: dict[str, list[float]] = {}  # name -> seconds in each recorded step
    for e in everything:
        is_op = e.name.startswith("aten::")
        if not (is_op or e.name in LABELS):
            continue
        i = bisect.bisect_right(starts, e.time_range.start) - 1
        if i >= 0 and e.time_range.start < steps[i][1]:
            per_step.setdefault(e.name, [0.0] * len(steps))[i] += \
                1e-6 * (e.self_cpu_time_total if is_op else e.cpu_time_total)
    median = lambda name: statistics.median(per_step[name]) if name in per_step else 0.0  # noqa: E731  (one line: 08-profiler-step-time-is-the-mean mutates it)
    ops = sorted((OpStat(a.key, a.count, a.self_cpu_time_total * 1e-6, a.cpu_time_total * 1e-6, median(a.key),
                         getattr(a, "self_device_time_total", 0.0) * 1e-6)
                  for a in averages if a.key.startswith("aten::")), key=lambda o: (-o.step_self_s, -o.self_s))
    labels = {k: median(k) for k in LABELS if k in per_step}
    labels["step"] = statistics.median(1e-6 * (b - a) for a, b in steps)
    events = [e for e in everything if e.name.startswith("aten::")]
    top_level = [e for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    kernels = None
    if device.type == "cuda":
        kernels = sum(a.count for a in averages  # kernels and copies; not the labels mirrored on the GPU
                      if getattr(a, "device_type", None) == torch.autograd.DeviceType.CUDA
                      and not getattr(a, "is_user_annotation", False)
                      and a.key not in LABELS
                      and not a.key.startswith("ProfilerStep")) / active
    by_shape = sorted(((a.key, str(a.input_shapes), a.count, a.self_cpu_time_total * 1e-6)
                       for a in prof.key_averages(group_by_input_shape=True) if a.key.startswith("aten::")),
                      key=lambda r: -r[3])
    if trace_path is not None:
        prof.export_chrome_trace(str(trace_path))
    return EngineProfile(active, str(device), ops, labels, len(events) / active, len(top_level) / active,
                         kernels, by_shape, None if trace_path is None else str(trace_path))
    # END SOLUTION


#: The phases `label_engine` marks, as `record_function` names.
LABELS = ("schedule", "forward", "sample")


@dataclass(frozen=True)
class OpStat:
    """One operator over the profiled steps: calls, self time (its own, children excluded)
    and total time (children included), in seconds, summed over the steps; `step_self_s`,
    the MEDIAN over the steps of its self time in one step (robust to the one step in
    which the process was descheduled mid-operator, common on a shared machine); on CUDA
    also device self time."""

    name: str
    calls: int
    self_s: float
    total_s: float
    step_self_s: float = 0.0
    device_self_s: float = 0.0


@dataclass
class EngineProfile:
    """What `profile_engine` found over its `steps` active (recorded) steps.

    steps: the number of active steps (`active`); device: str(engine.device).
    ops: one `OpStat` per `aten::` operator name (nothing else), from `prof.key_averages()`:
    `calls` and `self_s` / `total_s` summed over the active steps (so total_s >= self_s),
    `step_self_s` the median over the steps of its self time in a step (0 in a step that
    did not call it; so <= self_s, and not self_s / steps); sorted by step_self_s, largest
    first (ties: larger self_s first). An event belongs to the step whose ProfilerStep
    range holds its start.
    labels: {"schedule", "forward", "sample", "step"} -> seconds, the median over the steps
    of the time in each labelled phase (the TOTAL time of its `record_function`, the
    operators inside included; 0 in a step without it) and of the whole `ProfilerStep`
    ("step"); a phase never seen is left out.
    ops_per_step: aten operator events per step, nested calls included (aten::linear calls
    aten::addmm); top_level_ops_per_step: only those whose parent is not an aten op (called
    from Python) — the dispatcher round-trips your code pays for. kernels_per_step: GPU
    kernels (and memory copies) launched per step, not counting the labels the profiler
    mirrors on the GPU; None on the CPU.
    by_shape: (name, str(input shapes), calls, self s) per aten op and input shapes, from
    `key_averages(group_by_input_shape=True)`, most self time first.
    trace_path: str(trace_path) when a Chrome trace was written, else None."""

    steps: int
    device: str
    ops: list[OpStat]
    labels: dict[str, float]
    ops_per_step: float
    top_level_ops_per_step: float
    kernels_per_step: float | None
    by_shape: list[tuple[str, str, int, float]]
    trace_path: str | None = None

    def top(self, n: int = 10) -> list[OpStat]:
        return self.ops[:n]

    def table(self, n: int = 10) -> str:
        """The top-n operators as an aligned text table: calls per step, median self time
        per step, and its share of all operators' (median) self time."""
        total = sum(o.step_self_s for o in self.ops) or 1.0
        lines = [f"{'operator':<48} {'calls/step':>10} {'self µs/step':>13} {'share':>6}"]
        for o in self.top(n):
            lines.append(f"{o.name[:48]:<48} {o.calls / self.steps:>10.1f} {1e6 * o.step_self_s:>13.1f} "
                         f"{o.step_self_s / total:>6.1%}")
        return "\n".join(lines)


def label_engine(engine):
    """Label an engine's step phases for the profiler, without changing the engine: the
    instance's `scheduler.schedule`, `_forward` and `_sample` are wrapped in
    `record_function("schedule" / "forward" / "sample")`. Idempotent; returns the engine."""
    if getattr(engine, "_profiling_labels", False):
        return engine

    def wrap(obj, attr: str, label: str) -> None:
        inner = getattr(obj, attr)

        def labelled(*a, **kw):
            with record_function(label):
                return inner(*a, **kw)

        setattr(obj, attr, labelled)

    wrap(engine.scheduler, "schedule", "schedule")
    wrap(engine, "_forward", "forward")
    wrap(engine, "_sample", "sample")
    engine._profiling_labels = True
    return engine


_profiler_warm = False


def _warm_profiler() -> None:
    """The first profiler session of a process pays a one-off start-up (the tracing
    library initialises) that inflates the first recorded operators several times over;
    pay it once, on nothing, before the first real profile."""
    global _profiler_warm
    if not _profiler_warm:
        with profile(activities=[ProfilerActivity.CPU]):
            torch.ones(8) @ torch.ones(8)
        _profiler_warm = True
