# GENERATED from solutions/profiling/engine_profile.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 08_profiling/08_profiling.ipynb. Exercises in this file (line of each hole, then the commands):
#   8.2 torch.profiler around engine steps: line 39; `course check 8.2`, `course hint 8.2`
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
    raise NotImplementedError('Exercise 8.2: torch.profiler around engine steps — see 08_profiling.ipynb')


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
