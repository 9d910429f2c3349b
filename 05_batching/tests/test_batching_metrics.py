"""Exercise 5.7: per-request latencies, percentiles and the per-run summary."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course
from solutions.workload import make_trace

b = course.load("batching")
S = b.State
pytestmark = pytest.mark.exercise("5.7")


def timed_request(token_times, *, admitted=1.5, arrival=1.0, reason="length"):
    r = b.Request([1, 2], max(1, len(token_times)), request_id="m")
    r.arrival = arrival
    r.events.append(b.Event(arrival, S.WAITING))
    if admitted is not None:
        r.transition(S.RUNNING, admitted)
    for i, t in enumerate(token_times):
        r.append_token(10 + i, t)
    end = token_times[-1] if token_times else (admitted or arrival) + 0.1
    r.transition(S.FINISHED, end, reason)
    return r


def test_request_metrics_from_its_timestamps():
    m = b.request_metrics(timed_request([2.0, 2.25, 2.75]))
    assert (m.request_id, m.prompt_tokens, m.output_tokens, m.finish_reason) == ("m", 2, 3, "length"), (
        "request_id, prompt_tokens (len(prompt)), output_tokens (len(output)) and finish_reason come from the request")
    assert m.queue == pytest.approx(0.5), f"queue = first RUNNING event (1.5) - arrival (1.0) = 0.5, got {m.queue}"
    assert m.ttft == pytest.approx(1.0), f"TTFT = first token time (2.0) - arrival (1.0) = 1.0, got {m.ttft}"
    assert m.itl == pytest.approx((0.25, 0.5)), f"ITL: the gaps between consecutive token times, got {m.itl}"
    assert m.tpot == pytest.approx(0.375), (
        f"TPOT = (last token time - first) / (tokens - 1) = 0.75 / 2 (3 tokens, 2 gaps), got {m.tpot}")
    assert m.e2e == pytest.approx(1.75), f"e2e = the last event's time (2.75) - arrival (1.0), got {m.e2e}"
    assert m.preemptions == 0


def test_metrics_that_do_not_exist_are_none():
    one = b.request_metrics(timed_request([3.0]))
    assert one.ttft == pytest.approx(2.0) and one.tpot is None and one.itl == ()
    never = b.request_metrics(timed_request([], admitted=None, reason="abort"))
    assert never.queue is None and never.ttft is None and never.tpot is None
    assert never.e2e == pytest.approx(0.1) and never.finish_reason == "abort"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(0, 1e3)), max_size=30), st.sampled_from([0, 50, 90, 99, 100]))
def test_percentile_matches_numpy_and_skips_none(values, q):
    xs = [v for v in values if v is not None]
    got = b.percentile(values, q)
    if xs:
        assert got == pytest.approx(float(np.percentile(xs, q)))
    else:
        assert math.isnan(got)


def test_percentile_rejects_a_bad_q():
    with pytest.raises(ValueError, match="q"):
        b.percentile([1.0], 101)


def test_the_run_summary(serve_trace):
    tr = make_trace(10, seed=3, short_prompt=(2, 8), long_prompt=(12, 20), short_output=(2, 5), long_output=(8, 16))
    result = serve_trace(b.ContinuousBatching(4), tr, step_time=0.01)
    s = b.summarize(result)
    tokens = sum(len(r.output) for r in result.requests)
    end = max(r.events[-1].time for r in result.requests)
    assert s["requests"] == 10 and s["aborted"] == 0 and s["output_tokens"] == tokens
    assert s["seconds"] == pytest.approx(end - result.start)
    assert s["tokens_per_s"] == pytest.approx(tokens / (end - result.start))
    assert s["occupancy"] == pytest.approx(np.mean([st.rows for st in result.steps]) / 4)
    # a continuous batch decodes every running request at every step: every gap is one step
    assert s["itl_p50_ms"] == pytest.approx(10.0) and s["itl_p99_ms"] == pytest.approx(10.0)
    ttfts = [b.request_metrics(r).ttft for r in result.requests]
    assert s["ttft_p50_ms"] == pytest.approx(1e3 * np.percentile(ttfts, 50))
    assert s["ttft_p99_ms"] == pytest.approx(1e3 * np.percentile(ttfts, 99))
    for name in ("queue", "ttft", "tpot", "itl", "e2e"):
        assert s[f"{name}_p50_ms"] <= s[f"{name}_p99_ms"]


def test_aborted_requests_are_counted_not_timed(model):
    clock = b.ManualClock()
    engine = b.Engine(model, b.ContinuousBatching(2), clock=clock)
    reqs = [engine.add_request(b.Request([1 + i, 2], 3)) for i in range(2)]
    while engine.has_unfinished():
        engine.step()
        clock.sleep(0.01)
    reqs.append(engine.add_request(b.Request([5, 6], 3)))
    clock.sleep(100.0)
    assert engine.abort(reqs[2].request_id)
    s = b.summarize(b.RunResult("x", reqs, engine.steps, 0.0, clock(), 2))
    assert s["requests"] == 2 and s["aborted"] == 1 and s["output_tokens"] == 6
    assert s["e2e_p99_ms"] < 1000, "the aborted request's 100 s is not in the latencies"
