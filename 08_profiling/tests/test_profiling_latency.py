"""Exercise 8.6: stage 07's request log parsed (synthetic lines and records of a real
offline engine run), the latency breakdown, and the recommendation it leads to."""

import json

import numpy as np
import pytest

import course
from solutions.batching import ContinuousBatching, Engine, ManualClock, replay, request_metrics
from solutions.workload import make_trace

prof = course.load("profiling")


def rec(i, queue, prefill, decode, **kw):
    r = {"request_id": f"r{i}", "prompt_tokens": 10, "output_tokens": 5, "queue_s": queue, "ttft_s": queue + prefill,
         "prefill_s": prefill, "decode_s": decode, "e2e_s": queue + prefill + decode, "mean_tpot_s": decode / 4,
         "finish_reason": "length", "prefix_hit_tokens": 0}
    r.update(kw)
    return r


@pytest.mark.exercise("8.6")
def test_parse_good_and_bad_lines():
    good = rec(0, 0.1, 0.2, 0.3)
    lines = [json.dumps(good),
             "2026-11-30 12:00:00 INFO course.server " + json.dumps(rec(1, 0.0, 0.1, 0.5, extra=7)),
             "",
             "not json at all",
             "{\"request_id\": ",
             json.dumps([1, 2]),
             json.dumps({k: v for k, v in good.items() if k != "decode_s"}),
             json.dumps(rec(2, -0.1, 0.1, 0.1)),
             json.dumps(rec(3, True, 0.1, 0.1)),
             json.dumps(good).encode(),
             json.dumps(rec(4, 0.2, 0.0, 0.0) | {"prefill_s": None, "decode_s": None, "ttft_s": None})]  # aborted
    log = prof.parse_request_log(lines)
    assert [r["request_id"] for r in log.records] == ["r0", "r1", "r0", "r4"]
    assert log.records[1]["extra"] == 7 and log.records[3]["decode_s"] is None
    assert [n for n, _ in log.malformed] == [4, 5, 6, 7, 8, 9]
    assert "decode_s" in log.malformed[3][1]


@pytest.mark.exercise("8.6")
def test_breakdown_by_hand():
    records = [rec(0, 1.0, 1.0, 2.0), rec(1, 0.0, 1.0, 3.0), rec(2, 3.0, 0.0, 1.0)]  # e2e 4, 4, 4
    bd = prof.latency_breakdown(records)
    assert bd["queue"]["share"] == pytest.approx(4 / 12)
    assert bd["prefill"]["share"] == pytest.approx(2 / 12)
    assert bd["decode"]["share"] == pytest.approx(6 / 12)
    assert bd["decode"]["p50"] == 2.0 and bd["decode"]["mean"] == 2.0
    assert bd["queue"]["p99"] == pytest.approx(np.percentile([1.0, 0.0, 3.0], 99))
    assert bd["ttft"]["p50"] == 2.0 and bd["e2e"]["p99"] == 4.0 and "share" not in bd["e2e"]


@pytest.mark.exercise("8.6")
def test_incomplete_records_count_where_their_times_exist():
    """An aborted request: queued 5 s, never scheduled. Its queue time counts in the queue
    percentiles, but the shares are over complete records only."""
    aborted = rec(9, 5.0, 0.0, 0.0) | {"prefill_s": None, "decode_s": None, "ttft_s": None}
    bd = prof.latency_breakdown([rec(0, 1.0, 1.0, 2.0), aborted])
    assert bd["queue"]["mean"] == 3.0 and bd["prefill"]["mean"] == 1.0
    assert bd["queue"]["share"] == 0.25 and bd["decode"]["share"] == 0.5
    with pytest.raises(ValueError, match="complete"):
        prof.latency_breakdown([aborted])


@pytest.mark.exercise("8.6")
def test_records_of_a_real_engine_run(model):
    """Replay a trace on a ManualClock; build stage 07's records from the requests, log
    them as JSON lines, parse them back: the breakdown agrees with stage 05's metrics."""
    clock = ManualClock()
    trace = make_trace(12, profile="uniform", rate=400.0, seed=3)
    result = replay(Engine(model, ContinuousBatching(4), clock=clock), trace, sleep=clock.sleep, step_time=0.01)
    lines = [json.dumps(prof.record_from_request(r)) for r in result.requests]
    log = prof.parse_request_log(lines)
    assert len(log.records) == 12 and not log.malformed
    bd = prof.latency_breakdown(log.records)
    assert sum(bd[p]["share"] for p in ("queue", "prefill", "decode")) == pytest.approx(1.0)
    m = [request_metrics(r) for r in result.requests]
    assert bd["e2e"]["p50"] == pytest.approx(np.percentile([x.e2e for x in m], 50))
    assert bd["ttft"]["p99"] == pytest.approx(np.percentile([x.ttft for x in m], 99))


@pytest.mark.exercise("8.6")
@pytest.mark.parametrize("shares, kw, key", [
    ((0.6, 0.1, 0.3), dict(knee_batch=32, max_batch_size=8), "raise_batch"),
    ((0.6, 0.1, 0.3), dict(knee_batch=8, max_batch_size=8), "add_capacity"),
    ((0.6, 0.1, 0.3), {}, "add_capacity"),
    ((0.1, 0.6, 0.3), dict(decode_regime="overhead"), "prefill"),
    ((0.1, 0.2, 0.7), dict(decode_regime="overhead"), "cut_overhead"),
    ((0.1, 0.2, 0.7), dict(decode_regime="bandwidth"), "fewer_bytes"),
    ((0.1, 0.2, 0.7), dict(decode_regime="compute"), "fewer_flops"),
    ((0.1, 0.2, 0.7), {}, "profile_decode"),
])
def test_recommendation_follows_the_dominant_phase(shares, kw, key):
    bd = {p: {"share": s} for p, s in zip(("queue", "prefill", "decode"), shares)}
    r = prof.recommend(bd, **kw)
    assert r.key == key
    assert f"{max(shares):.0%}" in r.evidence


@pytest.mark.given
def test_metrics_scrape_is_parsed():
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    reg = CollectorRegistry()
    h = Histogram("course_ttft_seconds", "time to first token", registry=reg, buckets=(0.1, 1.0))
    h.observe(0.05)
    h.observe(0.5)
    m = prof.parse_metrics(generate_latest(reg).decode())
    assert m["course_ttft_seconds_count"] == 2 and m["course_ttft_seconds_sum"] == pytest.approx(0.55)
    assert m['course_ttft_seconds_bucket{le="0.1"}'] == 1


@pytest.mark.given
def test_phase_shares_from_a_scrape():
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    reg = CollectorRegistry()
    spans = {"queue": (1.0, 3.0), "prefill": (0.5, 0.5), "decode": (2.5, 0.5), "e2e": (4.0, 4.0)}
    for phase, name in prof.PHASE_METRICS.items():
        h = Histogram(name.replace(":", "_"), phase, ["model_name"], registry=reg)
        for v in spans[phase]:
            h.labels(model_name="m").observe(v)
    scrape = generate_latest(reg).decode().replace("vllm_", "vllm:")
    shares = prof.phase_shares_from_metrics(prof.parse_metrics(scrape))
    assert shares == pytest.approx({"queue": 0.5, "prefill": 0.125, "decode": 0.375})
    with pytest.raises(ValueError, match="_sum"):
        prof.phase_shares_from_metrics({})


@pytest.mark.given
def test_bad_inputs_are_refused():
    with pytest.raises(TypeError):
        prof.parse_request_log("one string")
    with pytest.raises(ValueError):
        prof.latency_breakdown([])
    with pytest.raises(ValueError, match="decode_regime"):
        prof.recommend({p: {"share": 0.3} for p in ("queue", "prefill", "decode")}, decode_regime="fast")


@pytest.mark.exercise("8.6")
def test_times_must_be_finite_non_negative_numbers():
    lines = [json.dumps(rec(0, 0.1, 0.1, 0.1)),
             json.dumps(rec(1, 0.1, 0.1, 0.1)).replace('"e2e_s": 0.30000000000000004', '"e2e_s": 1e999'),
             json.dumps(rec(2, 0.1, 0.1, 0.1) | {"queue_s": "0.1"}),
             json.dumps(rec(3, 0.1, 0.1, 0.1) | {"ttft_s": None}),
             json.dumps(rec(4, 0, 0, 0))]
    log = prof.parse_request_log(lines)
    assert [r["request_id"] for r in log.records] == ["r0", "r3", "r4"], (
        "a time is null or a finite int / float >= 0: 1e999 (inf) and the string '0.1' are malformed, "
        f"null and int 0 are fine; kept {[r['request_id'] for r in log.records]}")
    assert [n for n, _ in log.malformed] == [2, 3]


@pytest.mark.exercise("8.6")
def test_evidence_quotes_every_phase():
    bd = {"queue": {"share": 0.1}, "prefill": {"share": 0.3}, "decode": {"share": 0.6}}
    r = prof.recommend(bd, decode_regime="bandwidth")
    for phase, pct in (("queue", "10%"), ("prefill", "30%"), ("decode", "60%")):
        assert f"{phase} {pct}" in r.evidence, \
            f"evidence quotes every phase's share as f'{{share:.0%}}' (e.g. '{phase} {pct}'); got {r.evidence!r}"
    assert "bandwidth" in r.evidence, "the evidence names the decode regime the choice rests on"
