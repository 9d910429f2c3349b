"""What an engine step reports: StepRecord (kept per step, for metrics and plots) and
StepOutput (what `Engine.step()` returns)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .request import Request


@dataclass(frozen=True)
class StepRecord:
    """What one model step did (the engine keeps one per step, for metrics and plots)."""

    start: float
    end: float
    rows: int            # requests that ran tokens this step: the batch's occupancy
    dead_rows: int       # rows of finished requests a fixed-shape batch still computed
    decode_rows: int     # of which decoding (one token each)
    prefill_tokens: int  # prompt (or recompute) tokens run this step
    running: int         # requests holding a cache row
    waiting: int
    cached_tokens: int   # tokens in the cache after the step (never above max_cache_tokens)


@dataclass
class StepOutput:
    """What `Engine.step()` produced: `tokens` to stream, requests that finished or were
    preempted. `ran` is False when the scheduler planned nothing (idle, or waiting for a
    batch to fill)."""

    ran: bool
    tokens: list[tuple[Request, int]] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
