"""OpenTelemetry spans per request (given code, tracing.py): off by default; with a tracer
provider, each finished sequence is one `llm_request` trace whose `queue`, `prefill` and
`decode` children are its log line's durations, laid end to end. Read back through the
opentelemetry-sdk's in-memory exporter."""

from __future__ import annotations

import pytest

import course

srv = course.load("server")
M = "course-gpt"
S = 1_000_000_000  # ns a second


def _provider():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _traces(exporter) -> dict[str, dict]:
    """{request id: {span name: span}} of the finished spans."""
    spans = exporter.get_finished_spans()
    roots = {s.context.trace_id: s for s in spans if s.name == "llm_request"}
    out: dict[str, dict] = {}
    for s in spans:
        out.setdefault(roots[s.context.trace_id].attributes["gen_ai.request.id"], {})[s.name] = s
    return out


@pytest.mark.given
def test_a_finished_request_is_one_trace_of_queue_prefill_decode():
    provider, exporter = _provider()
    tracer = srv.RequestTracer(provider)
    line = {"request_id": "cmpl-7-p0", "prompt_tokens": 12, "output_tokens": 5, "queue_s": 0.25, "ttft_s": 0.75,
            "prefill_s": 0.5, "decode_s": 1.0, "e2e_s": 1.75, "mean_tpot_s": 0.25, "finish_reason": "length",
            "prefix_hit_tokens": 0}
    tracer.record(line, "alice", end_ns=10 * S)
    trace = _traces(exporter)["cmpl-7-p0"]
    assert set(trace) == {"llm_request", "queue", "prefill", "decode"}, set(trace)
    root = trace["llm_request"]
    assert (root.start_time, root.end_time) == (10 * S - 1_750_000_000, 10 * S), "arrival to end: e2e_s"
    assert [(trace[n].start_time - root.start_time, trace[n].end_time - root.start_time)
            for n in ("queue", "prefill", "decode")] == [(0, S // 4), (S // 4, 3 * S // 4), (3 * S // 4, 7 * S // 4)]
    assert all(trace[n].parent.span_id == root.context.span_id for n in ("queue", "prefill", "decode"))
    a = root.attributes
    assert (a["gen_ai.usage.prompt_tokens"], a["gen_ai.usage.completion_tokens"], a["gen_ai.user"]) == (12, 5, "alice")
    assert (a["gen_ai.latency.time_in_queue"], a["gen_ai.latency.time_to_first_token"], a["gen_ai.latency.e2e"]) == (
        0.25, 0.75, 1.75) and tuple(a["gen_ai.response.finish_reasons"]) == ("length",)
    never = {**line, "request_id": "cmpl-8-p0", "output_tokens": 0, "queue_s": None, "ttft_s": None,
             "prefill_s": None, "decode_s": None, "e2e_s": 0.5, "mean_tpot_s": None, "finish_reason": "abort"}
    tracer.record(never, end_ns=20 * S)
    assert set(_traces(exporter)["cmpl-8-p0"]) == {"llm_request"}, "aborted in the queue: no span it never had"
    assert srv.ServerConfig().tracer_provider is None, "tracing is off by default"


@pytest.mark.given
@pytest.mark.parametrize("url", ["collector:4318", "ftp://x/v1/traces"])
def test_a_bad_otlp_endpoint_exits_2_naming_it(url, capsys):
    assert srv.main(["--otlp-traces-endpoint", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--otlp-traces-endpoint" in err and "Traceback" not in err


@pytest.mark.exercise("7.6")
def test_every_request_served_is_traced(start, kit):
    """Over HTTP, with the in-memory exporter: one trace per answer, named by the response
    id, whose children add up to its end-to-end time, as its log line says."""
    provider, exporter = _provider()
    h = start(tracer_provider=provider)
    with kit.client(h) as c:
        ids = [c.post("/v1/completions", json={"model": M, "prompt": p, "max_tokens": 4, "temperature": 0}).json()["id"]
               for p in ("def f():", "class A:")]
    kit.wait_until(lambda: len(exporter.get_finished_spans()) >= 8, what="both requests' spans")
    traces = _traces(exporter)
    assert sorted(r.rsplit("-p", 1)[0] for r in traces) == sorted(ids), (list(traces), ids)
    lines = {ln["request_id"]: ln for ln in h.state.finished_lines}
    for rid, trace in traces.items():
        assert set(trace) == {"llm_request", "queue", "prefill", "decode"}, set(trace)
        root = trace["llm_request"]
        assert root.end_time - root.start_time == pytest.approx(lines[rid]["e2e_s"] * S, abs=2)
        assert trace["decode"].end_time - trace["queue"].start_time <= root.end_time - root.start_time
    kit.assert_clean(h)
