"""7.6 Metrics (vLLM's names) consistent with the requests sent, and one JSON log line per
finished request (the keys stage 08 parses)."""

from __future__ import annotations

import json
import logging

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

import course
from solutions.batching import Event, Request, State

srv = course.load("server")
pytestmark = pytest.mark.exercise("7.6")
M = "course-gpt"
KEYS = {"request_id", "prompt_tokens", "output_tokens", "queue_s", "ttft_s", "prefill_s", "decode_s", "e2e_s",
        "mean_tpot_s", "finish_reason", "prefix_hit_tokens"}


def finished(times, prompt=(1, 2, 3), events=None, reason="length"):
    r = Request(list(prompt), max(1, len(times)), request_id="r1")
    r.arrival = 1.0
    r.events = events or [Event(1.0, State.WAITING), Event(1.25, State.RUNNING),
                          Event(times[-1] if times else 1.5, State.FINISHED, reason)]
    r.state, r.finish_reason = State.FINISHED, reason
    r.output = [7] * len(times)
    r.token_times = list(times)
    return r


def test_request_log_spans():
    line = srv.request_log(finished([1.5, 1.75, 1.9, 2.0]))
    assert set(line) == KEYS
    assert line["request_id"] == "r1" and line["prompt_tokens"] == 3 and line["output_tokens"] == 4
    expect = dict(queue_s=0.25, ttft_s=0.5, prefill_s=0.25, decode_s=0.5, e2e_s=1.0, mean_tpot_s=0.5 / 3)
    rule = dict(queue_s="arrival -> the first RUNNING event", ttft_s="arrival -> the first output token",
                prefill_s="the first RUNNING event -> the first output token",
                decode_s="the first output token -> the last one", e2e_s="arrival -> the last of request.events",
                mean_tpot_s="the mean gap between consecutive tokens: 4 tokens have 3 gaps, 0.5 s / 3")
    for k, v in expect.items():
        assert line[k] == pytest.approx(v), f"{k} is {rule[k]}: expected {v:.4g}, got {line[k]!r}"
    assert line["finish_reason"] == "length" and line["prefix_hit_tokens"] == 0
    assert line["e2e_s"] == pytest.approx(line["queue_s"] + line["prefill_s"] + line["decode_s"])
    json.dumps(line)


def test_request_log_preempted_aborted_and_single_token():
    ev = [Event(1.0, State.WAITING), Event(1.1, State.RUNNING), Event(1.2, State.PREEMPTED),
          Event(1.2, State.WAITING), Event(1.6, State.RUNNING), Event(2.0, State.FINISHED, "length")]
    line = srv.request_log(finished([1.8, 2.0], events=ev))
    assert line["queue_s"] == pytest.approx(0.1), "queue time ends at the FIRST scheduling"
    assert line["prefill_s"] == pytest.approx(0.7)
    one = srv.request_log(finished([1.5]))
    assert one["mean_tpot_s"] is None and one["decode_s"] == 0
    ev = [Event(1.0, State.WAITING), Event(3.0, State.FINISHED, "abort")]
    gone = srv.request_log(finished([], events=ev, reason="abort"))
    assert gone["output_tokens"] == 0 and gone["e2e_s"] == pytest.approx(2.0)
    assert gone["queue_s"] is None and gone["ttft_s"] is None and gone["mean_tpot_s"] is None
    ev = [Event(1.0, State.WAITING), Event(1.25, State.RUNNING), Event(1.9, State.FINISHED, "stop")]
    stopped = srv.request_log(finished([1.5, 1.75], events=ev, reason="stop"))  # a stop token, not kept, at 1.9
    assert stopped["e2e_s"] == pytest.approx(0.9), \
        (f"e2e_s ends at the last of request.events (finished at 1.9 s), not at the last kept token (1.75 s): "
         f"expected 0.9, got {stopped['e2e_s']!r}")
    assert srv.request_log(finished([1.5]), "stop")["finish_reason"] == "stop", "the server's reason wins"
    r = finished([1.5, 2.0])
    r.num_cached_tokens = None
    assert srv.request_log(r)["prefix_hit_tokens"] == 0, "num_cached_tokens None (never admitted) logs 0"
    r.num_cached_tokens = 16
    assert srv.request_log(r)["prefix_hit_tokens"] == 16, "prefix_hit_tokens is request.num_cached_tokens"
    assert list(srv.request_log(r)) == list(srv.LOG_KEYS), "the keys in LOG_KEYS order"


def test_observe_finished_updates_counters_and_histograms():
    m = srv.Metrics()
    r = finished([1.5, 1.75, 1.9, 2.0])
    m.observe_finished(srv.request_log(r), r)
    v = lambda name, **lab: m.registry.get_sample_value(name, {"model_name": M, **lab})  # noqa: E731
    assert v("vllm:request_success_total", finished_reason="length") == 1
    assert v("vllm:prompt_tokens_total") == 3 and v("vllm:generation_tokens_total") == 4
    assert v("vllm:time_to_first_token_seconds_count") == 1
    assert v("vllm:time_to_first_token_seconds_sum") == pytest.approx(0.5)
    assert v("vllm:inter_token_latency_seconds_count") == 3, \
        (f"itl gets one observation per gap between consecutive token_times (4 tokens: 3; arrival -> first "
         f"token is TTFT, not a gap), got {v('vllm:inter_token_latency_seconds_count')}")
    assert v("vllm:inter_token_latency_seconds_sum") == pytest.approx(0.5), "the gaps sum to the decode time"
    for name, value in (("e2e_request_latency", 1.0), ("request_queue_time", 0.25), ("request_prefill_time", 0.25),
                        ("request_decode_time", 0.5)):
        assert v(f"vllm:{name}_seconds_sum") == pytest.approx(value), name
    gone = finished([], events=[Event(1.0, State.WAITING), Event(3.0, State.FINISHED, "abort")], reason="abort")
    m.observe_finished(srv.request_log(gone), gone)
    assert v("vllm:request_success_total", finished_reason="abort") == 1
    assert v("vllm:time_to_first_token_seconds_count") == 1, "no first token, no TTFT sample"
    assert v("vllm:e2e_request_latency_seconds_count") == 2
    assert v("vllm:inter_token_latency_seconds_count") == 3, "no tokens, no inter-token gaps"
    cut = finished([1.5, 1.75], reason="length")  # the server cut it at a stop string
    m.observe_finished(srv.request_log(cut, "stop"), cut)
    assert v("vllm:request_success_total", finished_reason="stop") == 1, \
        "request_success is labelled with the log line's finish_reason (the server's)"
    assert v("vllm:request_success_total", finished_reason="length") == 1
    assert v("vllm:prompt_tokens_total") == 9 and v("vllm:generation_tokens_total") == 6, "counters add up"
    one = finished([1.5])
    m.observe_finished(srv.request_log(one), one)
    assert v("vllm:request_decode_time_seconds_count") == 3, \
        "a decode_s of 0 (a single token) is an observation: only None is skipped (3 lines with a decode time)"


def scrape(handle, kit) -> dict:
    with kit.client(handle) as c:
        text = c.get("/metrics").text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + ("" if not s.labels.get("finished_reason") else f"[{s.labels['finished_reason']}]")
            out[key] = out.get(key, 0.0) + s.value
    return out


def test_metrics_match_the_requests_sent(start, kit, tmp_path, caplog):
    log_path = tmp_path / "requests.jsonl"
    h = start(request_log=str(log_path))
    oai = openai.OpenAI(base_url=f"{h.url}/v1", api_key="x", max_retries=0, timeout=20)
    caplog.set_level(logging.INFO, logger="course.server")
    sent_prompt, sent_completion, seqs = 0, 0, 0
    for i, (n, stream) in enumerate([(1, False), (2, False), (1, True), (3, True), (1, False)]):
        prompt = f"prompt number {i}"
        kw = dict(model=M, prompt=prompt, max_tokens=6 + i, temperature=0.8, seed=i, n=n)
        if stream:
            chunks = list(oai.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
            usage = chunks[-1].usage
        else:
            usage = oai.completions.create(**kw).usage
        sent_prompt += n * len(prompt)
        sent_completion += usage.completion_tokens
        seqs += n
    kit.assert_clean(h)
    m = scrape(h, kit)
    assert m["vllm:request_success_total[stop]"] + m["vllm:request_success_total[length]"] == seqs
    assert m["vllm:request_success_total[abort]"] == 0
    assert m["vllm:prompt_tokens_total"] == sent_prompt, "prompt tokens: once per sequence"
    assert m["vllm:generation_tokens_total"] == sent_completion
    for hist in ("time_to_first_token", "e2e_request_latency", "request_queue_time", "request_prefill_time",
                 "request_decode_time"):
        assert m[f"vllm:{hist}_seconds_count"] == seqs, hist
    assert m["vllm:inter_token_latency_seconds_count"] == sent_completion - seqs
    # the given series beside 7.6's (metrics.py's observe_sizes and observe_params, the engine
    # loop's tokens a step): vLLM's request-size, parameter and step histograms
    assert m["vllm:request_prompt_tokens_count"] == seqs and m["vllm:request_prompt_tokens_sum"] == sent_prompt
    assert m["vllm:request_generation_tokens_sum"] == sent_completion
    assert m["vllm:request_inference_time_seconds_count"] == seqs
    assert (m["vllm:request_params_n_count"], m["vllm:request_params_n_sum"]) == (5, 1 + 2 + 1 + 3 + 1)
    assert m["vllm:request_params_max_tokens_sum"] == sum(6 + i for i in range(5))
    assert m["vllm:iteration_tokens_total_count"] >= 1, "every engine step's tokens are observed"
    assert sent_completion - seqs <= m["vllm:iteration_tokens_total_sum"] <= sent_prompt + sent_completion
    assert not [k for k in m if k.endswith("_created")], "no *_created series (vLLM disables them)"
    assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
    assert m["vllm:kv_cache_usage_perc"] == 0
    for name in ("vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
        assert name in m, name

    h.state.request_log.flush()  # the log lines are written by a thread of their own (given code: log_writer.py)
    lines = [json.loads(s) for s in log_path.read_text().splitlines()]
    assert len(lines) == seqs and all(set(ln) == KEYS for ln in lines)
    assert len({ln["request_id"] for ln in lines}) == seqs
    assert sum(ln["output_tokens"] for ln in lines) == sent_completion
    for ln in lines:
        parts = ln["queue_s"] + ln["prefill_s"] + ln["decode_s"]
        assert 0 <= ln["e2e_s"] - parts < 0.5, ln
        if ln["finish_reason"] == "length":
            assert ln["e2e_s"] == pytest.approx(parts, abs=1e-6), ln
        assert ln["ttft_s"] == pytest.approx(ln["queue_s"] + ln["prefill_s"], abs=1e-6)
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "course.server"
              and r.getMessage().startswith("{")]
    assert {ln["request_id"] for ln in logged} >= {ln["request_id"] for ln in lines}


def test_prefix_cache_hits_reach_the_log_and_the_metrics(start, kit):
    """Stage 06's prefix cache: the same 40-token prompt twice; the second finds its two
    full blocks cached, and both the log line and /metrics say so."""
    h = start()
    prompt = "# a shared system prompt, forty bytes!!\n"
    assert len(prompt) == 40
    with kit.client(h) as c:
        for _ in range(2):
            r = c.post("/v1/completions", json={"model": M, "prompt": prompt, "max_tokens": 3, "temperature": 0})
            assert r.status_code == 200
    kit.assert_clean(h)
    first, second = h.state.finished_lines[-2:]
    assert first["prefix_hit_tokens"] == 0 and second["prefix_hit_tokens"] == 32
    m = scrape(h, kit)
    assert m["vllm:prefix_cache_hits_total"] >= 32
    assert m["vllm:prefix_cache_queries_total"] >= 80
