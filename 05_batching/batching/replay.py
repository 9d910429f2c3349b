# GENERATED from solutions/batching/replay.py by `course stubs --write`.
# Nothing to write here: given code of stage 05 (05_batching/05_batching.ipynb).
"""Driving an engine with a trace: `replay` (and `serve`, a fresh engine per run) against the
engine's clock; `ManualClock` for deterministic, simulated time. A run is a `RunResult`
(metrics.py, beside the summary it is read by)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from solutions.gpt import GPT
from solutions.workload import Trace

from .engine import Engine
from .metrics import RunResult
from .request import Request
from .sampling_params import SamplingParams
from .scheduler import Scheduler


class ManualClock:
    """A clock that moves only when told: `clock()` reads it, `clock.sleep(dt)` advances it.
    Pass it as the engine's clock and `sleep` to `replay` for a deterministic replay."""

    def __init__(self, start: float = 0.0):
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot sleep a negative time, got {seconds}")
        self.now += seconds


def replay(engine: Engine, trace: Trace, *, sampling: SamplingParams | None = None, stop: Iterable[int] = (),
           sleep: Callable[[float], None] = time.sleep, step_time: float | None = None,
           name: str | None = None) -> RunResult:
    """Serve `trace` through `engine` against its clock, until every request has finished.

    A request is visible to the scheduler once its arrival offset has elapsed since the
    start; its arrival time is the offset's instant (so a request that arrived during a
    long step is charged the wait). When the engine can do nothing, the loop sleeps until
    the next arrival or the scheduler's `wake_time`. `step_time`: simulated time — with a
    `ManualClock`, charge this many seconds after each model step (so a step's events
    carry the time at which it started).
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a solutions.workload.Trace, got {type(trace).__name__}")
    if step_time is not None and not step_time >= 0:
        raise ValueError(f"step_time must be None or >= 0 seconds, got {step_time!r}")
    stop = tuple(stop)
    t0 = engine.clock()
    requests: list[Request] = []
    i = 0
    while i < len(trace) or engine.has_unfinished():
        now = engine.clock()
        while i < len(trace) and t0 + trace.requests[i].arrival <= now:
            tr = trace.requests[i]
            req = Request(tr.prompt, tr.max_new_tokens, sampling=sampling, stop=stop, request_id=f"{i}")
            requests.append(engine.add_request(req, arrival=t0 + tr.arrival))
            i += 1
        if engine.step().ran:
            if step_time:
                sleep(step_time)
            continue
        wake = [t for t in (engine.wake_time(), t0 + trace.requests[i].arrival if i < len(trace) else None)
                if t is not None]
        if not wake:
            if engine.has_unfinished():
                raise RuntimeError(f"{engine.scheduler!r} holds requests but will not run them: a scheduler bug")
            continue
        sleep(max(0.0, min(wake) - engine.clock()))
    end = max((r.events[-1].time for r in requests), default=t0)
    return RunResult(name or engine.scheduler.name, requests, list(engine.steps), t0, end,
                     engine.scheduler.max_batch_size)


def serve(model: GPT, trace: Trace, scheduler: Scheduler, **kw) -> RunResult:
    """A fresh engine for `scheduler`, replaying `trace` in real time (see `replay`)."""
    engine_kw = {k: kw.pop(k) for k in ("max_len", "clock") if k in kw}
    return replay(Engine(model, scheduler, **engine_kw), trace, **kw)
