# GENERATED from solutions/batching/metrics.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 05_batching/05_batching.ipynb. Exercises in this file (line of each hole, then the commands):
#   5.7 Metrics: TTFT, TPOT, ITL, p50/p99: lines 32, 39, 52; `course check 5.7`, `course hint 5.7`
"""Latency metrics: per request (queue, TTFT, TPOT, ITL, e2e), percentiles, a run's summary (5.7)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .outputs import StepRecord
from .request import Request
from .state import State


def request_metrics(request: Request) -> RequestMetrics:
    """The RequestMetrics of one request, from its `arrival`, `events` and `token_times`
    (seconds; None where a metric does not exist). Changes nothing.

    queue  from arrival to its FIRST admission (RUNNING; a re-admission after a preemption
           does not count); None if it was never admitted
    ttft   from arrival to its first output token; None without output
    itl    every gap between two consecutive output tokens, in order, a tuple (empty below
           two tokens)
    tpot   the mean of those gaps; None below two tokens
    e2e    from arrival to the moment it FINISHED (any reason); None until then
    and request_id, prompt_tokens, output_tokens (len(output)), finish_reason, preemptions
    copied from the request.
    """
    raise NotImplementedError('Exercise 5.7: Metrics: TTFT, TPOT, ITL, p50/p99 — see 05_batching.ipynb')


def percentile(values: Iterable[float | None], q: float) -> float:
    """The q-th percentile (q in 0..100; linear interpolation, as `np.percentile`'s default)
    of the values that are not None, as a float; NaN when there are none. A q outside
    0..100 is a ValueError naming q."""
    raise NotImplementedError('Exercise 5.7: Metrics: TTFT, TPOT, ITL, p50/p99 — see 05_batching.ipynb')


def summarize(result: RunResult) -> dict[str, float]:
    """One run in numbers, a dict with the keys
    "requests" (finished by "stop" or "length"), "aborted" (finished by "abort"),
    "output_tokens" (over every request), "seconds" (`result.end - result.start`),
    "tokens_per_s" (output_tokens / seconds; NaN if seconds is 0);
    "<m>_p50_ms" and "<m>_p99_ms" for m in queue, ttft, tpot, itl, e2e: `percentile` in
    milliseconds over the requests that completed (stop or length) — itl over every gap of
    every such request; and "occupancy": the mean over `result.steps` of rows run, divided
    by `result.max_batch_size` (NaN without steps).
    """
    raise NotImplementedError('Exercise 5.7: Metrics: TTFT, TPOT, ITL, p50/p99 — see 05_batching.ipynb')


# ---- given ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestMetrics:
    """Latencies of one request, in seconds (None where they do not exist).

    queue: arrival -> first admitted.  ttft: arrival -> first output token.
    itl: the gaps between consecutive output tokens.  tpot: their mean (time per output
    token after the first).  e2e: arrival -> finished.
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    finish_reason: str | None
    queue: float | None
    ttft: float | None
    tpot: float | None
    e2e: float | None
    itl: tuple[float, ...]
    preemptions: int


def format_table(rows: dict[str, dict[str, float]],
                 columns: Sequence[str] = ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
                                           "tpot_p99_ms", "itl_p99_ms", "occupancy")) -> str:
    """{run name: summary} as an aligned text table."""
    head = ["run", *columns]
    def cell(v) -> str:
        return str(v) if not isinstance(v, float) else f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"

    body = [[name, *(cell(s[c]) for c in columns)] for name, s in rows.items()]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    def line(r) -> str:
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))

    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, body)])


@dataclass
class RunResult:
    """A replayed trace (`replay.replay`): the requests (trace order), the engine's step log,
    the run's span."""

    name: str
    requests: list[Request]
    steps: list[StepRecord]
    start: float
    end: float
    max_batch_size: int

    def summary(self) -> dict[str, float]:
        return summarize(self)
