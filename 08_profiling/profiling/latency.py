# GENERATED from solutions/profiling/latency.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 08_profiling/08_profiling.ipynb. Exercises in this file (line of each hole, then the commands):
#   8.6 Request latency and the next change: lines 33, 49, 71; `course check 8.6`, `course hint 8.6`
"""Where a request's time goes (8.6): stage 07's request log, its breakdown, the next change."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from solutions.batching import Request, request_metrics


def parse_request_log(lines: Iterable[str | bytes]) -> RequestLog:
    """Parse stage 07's request log (one JSON object per line, with every key of `LOG_KEYS`)
    into a `RequestLog`: the good records in order (as parsed dicts, extra keys kept), and
    `malformed`: (1-based line number, reason) for each bad line, in order.

    A line may be str or bytes (UTF-8), may end in "\\r\\n", and may carry a logging prefix
    before the JSON (`2026-… INFO course.server {…}`): parse from its first "{". Blank
    lines are skipped (but still counted in the numbering). Malformed: no "{", not JSON, not
    a JSON object, a missing key (the reason names the missing keys), or a time (`queue_s`,
    `ttft_s`, `prefill_s`, `decode_s`, `e2e_s`) that is neither null nor a finite int /
    float >= 0 (bools and strings are not times; 1e999 parses as inf, not finite).
    Raises TypeError if `lines` is a single str or bytes.
    """
    if isinstance(lines, (str, bytes)):
        raise TypeError("parse_request_log expects an iterable of lines; use text.splitlines()")
    raise NotImplementedError('Exercise 8.6: Request latency and the next change — see 08_profiling.ipynb')


def latency_breakdown(records: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Where the requests' time went: {phase: {"p50", "p99", "mean"[, "share"]}} for phase
    in ("queue", "prefill", "decode", "ttft", "e2e"), in seconds, as floats.

    p50 / p99 (`np.percentile`, linear) and mean of `{phase}_s` over the records where it
    is not None (an aborted request's queue time counts). For the three phases only,
    "share" = sum of the phase / sum of e2e_s, both over the COMPLETE records (queue_s,
    prefill_s, decode_s and e2e_s all present), so the shares add up to 1 when
    queue + prefill + decode = e2e; nan if that e2e sum is 0. The records are not changed.
    Raises ValueError when there are no records, or no complete one (message says "complete").
    """
    if not records:
        raise ValueError("latency_breakdown needs at least one record")
    raise NotImplementedError('Exercise 8.6: Request latency and the next change — see 08_profiling.ipynb')


def recommend(breakdown: dict[str, dict[str, float]], *, decode_regime: str | None = None,
              knee_batch: int | None = None, max_batch_size: int | None = None) -> Recommendation:
    """The one change the data says to make next: a `Recommendation` whose `key` follows the
    phase with the largest share of e2e time (only the "share" entries are read):

    - "queue": "raise_batch" when knee_batch and max_batch_size are both given and
      knee_batch > max_batch_size (more rows are nearly free), else "add_capacity";
    - "prefill": "prefill" (chunked prefill, prefix caching, shorter prompts);
    - "decode", by the decode step's roofline regime: "overhead" -> "cut_overhead",
      "bandwidth" -> "fewer_bytes", "compute" -> "fewer_flops", None -> "profile_decode".
    `evidence` quotes every phase's share as a whole percent (f"{share:.0%}", e.g. "queue
    60%"), plus the regime / knee the choice rests on; `advice` is one sentence.
    Raises ValueError if a phase's share is missing, or decode_regime is none of those.
    """
    for phase in ("queue", "prefill", "decode"):
        if phase not in breakdown or "share" not in breakdown[phase]:
            raise ValueError(f"breakdown lacks the share of {phase!r}; pass latency_breakdown(...)")
    if decode_regime not in (None, "compute", "bandwidth", "overhead"):
        raise ValueError(f"decode_regime must be None, 'compute', 'bandwidth' or 'overhead', got {decode_regime!r}")
    raise NotImplementedError('Exercise 8.6: Request latency and the next change — see 08_profiling.ipynb')


#: The keys of one line of stage 07's request log (logger "course.server", JSON per line).
LOG_KEYS = ("request_id", "prompt_tokens", "output_tokens", "queue_s", "ttft_s", "prefill_s", "decode_s", "e2e_s",
            "mean_tpot_s", "finish_reason", "prefix_hit_tokens")
_LOG_NUMBERS = ("queue_s", "ttft_s", "prefill_s", "decode_s", "e2e_s")


@dataclass
class RequestLog:
    """Parsed request records, and the lines that were not records: (line number, why)."""

    records: list[dict]
    malformed: list[tuple[int, str]]


@dataclass(frozen=True)
class Recommendation:
    """The one change the measurements point at: a short `key`, the advice, and why."""

    key: str
    advice: str
    evidence: str


def record_from_request(request: Request, *, prefix_hit_tokens: int = 0) -> dict:
    """Stage 07's log record for a finished stage-05 request, with the server's definitions
    (seconds on the engine's clock; None where a span does not exist — an aborted request
    may never have been scheduled or produced a token):

        queue_s    arrival -> first scheduled        ttft_s   arrival -> first output token
        prefill_s  first scheduled -> first token    decode_s first -> last output token
        e2e_s      arrival -> finished               mean_tpot_s  decode_s / (tokens - 1)

    so queue + prefill + decode = e2e when the request finishes with its last token."""
    m = request_metrics(request)
    if m.e2e is None:
        raise ValueError(f"request {request.request_id} has not finished")
    times = request.token_times
    first_scheduled = None if m.queue is None else request.arrival + m.queue
    return {"request_id": m.request_id, "prompt_tokens": m.prompt_tokens, "output_tokens": m.output_tokens,
            "queue_s": m.queue, "ttft_s": m.ttft,
            "prefill_s": None if not times or first_scheduled is None else times[0] - first_scheduled,
            "decode_s": times[-1] - times[0] if times else None, "e2e_s": m.e2e, "mean_tpot_s": m.tpot,
            "finish_reason": m.finish_reason, "prefix_hit_tokens": prefix_hit_tokens}
