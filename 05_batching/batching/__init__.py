# GENERATED from solutions/batching/__init__.py by `course stubs --write`.
# Nothing to write here: given code of stage 05 (05_batching/05_batching.ipynb).
"""Stage 05: batching — static, dynamic and continuous batching, with chunked prefill.

The files, in exercise order:

    request.py          Request: one request's state machine, tokens and timestamps   5.1
    model_runner.py     forward_chunks: one ragged forward over the planned chunks    5.2
    static.py           StaticBatching: a batch at a time, the worst case reserved    5.2
    dynamic.py          DynamicBatching: a batch when full or its window closed       5.3
    continuous.py       ContinuousBatching: admission before every step, the token
                        budget (chunked prefill), preemption                          5.4-5.6
    engine.py           Engine: model + cache + scheduler, step(); abort, requeue     5.6
    metrics.py          request_metrics, percentile, summarize (TTFT, TPOT, ITL)      5.7

Given: state.py (State, TRANSITIONS, Event), sampling_params.py, scheduler.py (the
Scheduler base class: queues, cache accounting), outputs.py (StepRecord, StepOutput),
replay.py (replay / serve a trace, ManualClock), demo.py (default_model, demo).

    engine = Engine(model, ContinuousBatching(max_batch_size=8))
    engine.add_request(Request(prompt_ids, max_new_tokens=32))
    while engine.has_unfinished():
        out = engine.step()          # out.tokens: [(request, token)] to stream
"""

from __future__ import annotations

from solutions.workload import Trace, long_prompt_trace, make_trace

from .continuous import ContinuousBatching
from .demo import default_model, demo
from .dynamic import DynamicBatching
from .engine import Engine
from .metrics import RequestMetrics, format_table, percentile, request_metrics, summarize
from .model_runner import forward_chunks, sample_tokens
from .outputs import StepOutput, StepRecord
from .replay import ManualClock, RunResult, replay, serve
from .request import Request
from .sampling_params import SamplingParams
from .scheduler import Scheduler, SchedulerOutput
from .state import TRANSITIONS, Event, IllegalTransition, State
from .static import StaticBatching

__all__ = [
    "State", "TRANSITIONS", "IllegalTransition", "Event", "SamplingParams", "Request",
    "SchedulerOutput", "Scheduler", "StaticBatching", "DynamicBatching", "ContinuousBatching",
    "StepRecord", "StepOutput", "Engine", "ManualClock", "RunResult", "replay", "serve",
    "RequestMetrics", "request_metrics", "percentile", "summarize",
    "format_table", "default_model", "Trace", "make_trace", "long_prompt_trace",
]
