# GENERATED from solutions/server/tracing.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""OpenTelemetry spans per request (given code; optional, off by default).

With a tracer provider (`course serve --otlp-traces-endpoint URL`, or
`ServerConfig(tracer_provider=...)`, as the tests give an in-memory exporter's), each finished
sequence becomes one trace: a span `llm_request` (kind SERVER, vLLM's name) from its arrival
to its end, and three children, `queue`, `prefill` and `decode`, laid end to end from the
request log line's own durations, so that a trace, the log line and the metrics tell the
same story. The attributes use vLLM's names (`gen_ai.*`). The spans are made when the
sequence has finished, beside its log line (in the HTTP process; on the engine's thread
with `--in-process`), and the provider's batch processor exports them from a thread of its
own: the server never waits on the collector.
"""

from __future__ import annotations

import time
from typing import Any

SPANS = ("queue", "prefill", "decode")  # the children of `llm_request`, in order, as the log line's *_s keys


class RequestTracer:
    """Spans for finished sequences, from their log lines (`metrics.request_log`)."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("course.server")

    def record(self, line: dict, client: str = "", end_ns: int | None = None) -> None:
        """One trace for one finished sequence: `llm_request` ending at `end_ns` (default now,
        in ns since the epoch) and starting its `e2e_s` before, with `queue`, `prefill` and
        `decode` children from its start (a span the line has no time for is left out)."""
        from opentelemetry import trace

        end = time.time_ns() if end_ns is None else end_ns
        start = end - round((line["e2e_s"] or 0.0) * 1e9)
        attributes = {"gen_ai.request.id": line["request_id"], "gen_ai.usage.prompt_tokens": line["prompt_tokens"],
                      "gen_ai.usage.completion_tokens": line["output_tokens"],
                      "gen_ai.response.finish_reasons": [str(line["finish_reason"])], "gen_ai.user": client}
        for key, name in (("queue_s", "time_in_queue"), ("ttft_s", "time_to_first_token"), ("e2e_s", "e2e"),
                          ("prefill_s", "time_in_model_prefill"), ("decode_s", "time_in_model_decode")):
            if line[key] is not None:
                attributes[f"gen_ai.latency.{name}"] = line[key]
        root = self.tracer.start_span("llm_request", kind=trace.SpanKind.SERVER, start_time=start,
                                      attributes=attributes)
        inside, at = trace.set_span_in_context(root), start
        for name in SPANS:
            seconds = line[f"{name}_s"]
            if seconds is None:
                continue
            until = min(end, at + round(seconds * 1e9))
            self.tracer.start_span(name, context=inside, start_time=at).end(end_time=until)
            at = until
        root.end(end_time=end)

    def close(self) -> None:
        """Export what is still batched (the server's shutdown)."""
        shutdown = getattr(self.provider, "shutdown", None)
        if shutdown is not None:
            shutdown()


def otlp_provider(endpoint: str, service: str = "course-serve") -> Any:
    """A tracer provider that exports to an OTLP/HTTP collector at `endpoint` (for example
    `http://127.0.0.1:4318/v1/traces`), in batches, off the request's path."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider
