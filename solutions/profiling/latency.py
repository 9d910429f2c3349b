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
    # BEGIN SOLUTION 8.6
    # DECISION: what makes a log line malformed and how lines are numbered (blank lines counted),
    #   which records each statistic is taken over (a phase's own non-null times; the shares over
    #   the complete records only, so they add up to 1), and which phase's share decides the advice.
    # HINT: enumerate(lines, 1); decode bytes, strip, skip empty lines; then a chain of
    #   checks, each of which appends (n, reason) to the malformed list and `continue`s.
    # HINT: json.loads(line[line.find("{"):]) raises json.JSONDecodeError on bad JSON;
    #   a time is good when it is None, or not a bool, an int / float, finite and >= 0.
    records, bad = [], []
    for n, line in enumerate(lines, 1):
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        line = line.strip()
        if not line:
            continue
        start = line.find("{")
        if start < 0:
            bad.append((n, "no JSON object on the line"))
            continue
        try:
            rec = json.loads(line[start:])
        except json.JSONDecodeError as e:
            bad.append((n, f"not JSON: {e.msg}"))
            continue
        if not isinstance(rec, dict):
            bad.append((n, "not a JSON object"))
            continue
        missing = [k for k in LOG_KEYS if k not in rec]
        if missing:
            bad.append((n, f"missing keys {missing}"))
            continue
        wrong = [k for k in _LOG_NUMBERS if rec[k] is not None and (
            isinstance(rec[k], bool) or not isinstance(rec[k], (int, float))
            or not math.isfinite(rec[k]) or rec[k] < 0)]
        if wrong:
            bad.append((n, f"not a time >= 0: {wrong}"))
            continue
        records.append(rec)
    return RequestLog(records, bad)
    # END SOLUTION


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
    # BEGIN SOLUTION 8.6
    # HINT: Select the complete records first (fail if there are none) and sum their e2e_s;
    #   then per phase a float array of its non-None times gives p50, p99 and mean.
    phases = ("queue", "prefill", "decode")
    complete = [r for r in records if all(r[f"{p}_s"] is not None for p in (*phases, "e2e"))]
    if not complete:
        raise ValueError(f"latency_breakdown needs at least one complete record, got {len(records)} records")
    total = float(sum(r["e2e_s"] for r in complete))
    out: dict[str, dict[str, float]] = {}
    for phase in (*phases, "ttft", "e2e"):
        v = np.array([r[f"{phase}_s"] for r in records if r[f"{phase}_s"] is not None], dtype=float)
        row = {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)), "mean": float(v.mean())}
        if phase in phases:
            part = sum(r[f"{phase}_s"] for r in complete)
            row["share"] = float(part / total) if total > 0 else float("nan")
        out[phase] = row
    return out
    # END SOLUTION


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
    # BEGIN SOLUTION 8.6
    # HINT: The phase with the largest share decides; the evidence quotes every share, so build
    #   it once before choosing.
    # HINT: top = max(shares, key=shares.get); then one branch per phase (for decode, a dict
    #   from regime to (key, advice)).
    shares = {p: breakdown[p]["share"] for p in ("queue", "prefill", "decode")}
    top = max(shares, key=shares.get)
    evidence = ", ".join(f"{p} {s:.0%}" for p, s in shares.items()) + " of end-to-end time"
    if top == "queue":
        if knee_batch is not None and max_batch_size is not None and knee_batch > max_batch_size:
            return Recommendation("raise_batch", f"raise max_batch_size from {max_batch_size} toward {knee_batch}: "
                                  "throughput still grows there, so queued requests get rows almost for free",
                                  f"{evidence}; a bigger batch pays up to batch {knee_batch}")
        return Recommendation("add_capacity", "add capacity (another replica) or make each step faster: "
                              "a bigger batch no longer pays", evidence +
                              (f"; a bigger batch pays only up to batch {knee_batch}"
                               if knee_batch is not None else ""))
    if top == "prefill":
        return Recommendation("prefill", "shorten time to first token: chunked prefill, prefix caching, "
                              "shorter prompts", evidence)
    if decode_regime is None:
        return Recommendation("profile_decode", "decode dominates: profile a decode step to find its regime", evidence)
    advice = {"overhead": ("cut_overhead", "cut per-step overhead: fewer, bigger operations (a larger batch, fused "
                           "kernels, CUDA graphs) — a faster matmul would change nothing"),
              "bandwidth": ("fewer_bytes", "move fewer bytes per token: a larger batch shares the weight read; "
                            "quantise weights and the KV cache"),
              "compute": ("fewer_flops", "do fewer FLOPs: a smaller model or lower-precision math")}[decode_regime]
    return Recommendation(advice[0], advice[1], f"{evidence}; the decode step is {decode_regime}-bound")
    # END SOLUTION


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
