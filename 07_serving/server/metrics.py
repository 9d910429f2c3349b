# GENERATED from solutions/server/metrics.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 07_serving/07_serving.ipynb. Exercises in this file (line of each hole, then the commands):
#   7.6 Metrics and the per-request log line: lines 37, 117; `course check 7.6`, `course hint 7.6`
"""7.6 Metrics under vLLM's names, and one JSON log line per finished sequence."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

from solutions.batching import Request, State

from .protocol import MODEL_NAME

#: The keys of the one JSON log line per finished sequence, in this order (stage 08 parses these).
LOG_KEYS = ("request_id", "prompt_tokens", "output_tokens", "queue_s", "ttft_s", "prefill_s", "decode_s",
            "e2e_s", "mean_tpot_s", "finish_reason", "prefix_hit_tokens")


def request_log(request: Request, finish_reason: str | None = None) -> dict:
    """The log line of a FINISHED engine request: a dict with exactly LOG_KEYS, in order,
    JSON-serialisable; times in seconds on the engine's clock, None where a span does not
    exist (no first token, never scheduled):

        queue_s    arrival -> the FIRST RUNNING event (a preempted request is not requeued)
        ttft_s     arrival -> first output token
        prefill_s  first RUNNING event -> first output token
        decode_s   first output token -> last output token (0 for a single token)
        e2e_s      arrival -> finished (the time of the last of `request.events`)
        mean_tpot_s  the mean gap between consecutive output tokens; None below 2 tokens

    so that a request finishing with its last token has e2e = queue + prefill + decode.
    `prompt_tokens` / `output_tokens` are the lengths of `request.prompt` / `.output`;
    `finish_reason` is the argument when given (the server's: a stop string, a deadline,
    a disconnect), else `request.finish_reason`; `prefix_hit_tokens` is
    `request.num_cached_tokens` (stage 06's prefix cache) or 0 when absent or None.
    Changes nothing."""
    raise NotImplementedError('Exercise 7.6: Metrics and the per-request log line — see 07_serving.ipynb')


class Metrics:
    """Prometheus metrics under vLLM's current names (so its dashboards work), in a
    registry of their own (two servers in one process do not collide). Every series has
    the label `model_name`; `request_success` also `finished_reason` (stop, length, abort).
    Counters are exported with prometheus' `_total` suffix (`vllm:prompt_tokens_total`)."""

    def __init__(self, model_name: str = MODEL_NAME):
        # no `*_created` series (each counter's and histogram's creation time): vLLM turns them
        # off the same way (prometheus_client's switch, for the whole process)
        disable_created_metrics()
        self.registry = r = CollectorRegistry()
        labels = {"model_name": model_name}
        self.labels = labels
        names = ["model_name"]
        self.running = Gauge("vllm:num_requests_running", "Requests in the running batch", names, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to run", names, registry=r)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0-1)", names,
                              registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens of finished requests", names, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generated tokens", names, registry=r)
        self.preemptions = Counter("vllm:num_preemptions", "Preemptions", names, registry=r)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache",
                                      names, registry=r)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache", names,
                                   registry=r)
        self.success = Counter("vllm:request_success", "Finished requests by reason", names + ["finished_reason"],
                               registry=r)
        hist = lambda name, doc: Histogram(name, doc, names, buckets=_LATENCY_BUCKETS, registry=r)  # noqa: E731
        self.ttft = hist("vllm:time_to_first_token_seconds", "Time to first token")
        self.itl = hist("vllm:inter_token_latency_seconds", "Time between consecutive output tokens")
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Arrival to finish")
        self.queue = hist("vllm:request_queue_time_seconds", "Arrival to first scheduled")
        self.prefill = hist("vllm:request_prefill_time_seconds", "First scheduled to first token")
        self.decode = hist("vllm:request_decode_time_seconds", "First token to last token")
        self.inference = hist("vllm:request_inference_time_seconds", "First scheduled to finished (prefill + decode)")
        self._seen = {"preemptions": 0, "prefix_queries": 0, "prefix_hits": 0}
        for metric in (self.running, self.waiting, self.kv_usage, self.prompt_tokens, self.generation_tokens,
                       self.preemptions, self.prefix_queries, self.prefix_hits, self.ttft, self.itl, self.e2e,
                       self.queue, self.prefill, self.decode, self.inference, *self._size_histograms(r, names)):
            metric.labels(**labels)  # export every series from the start, at 0
        for reason in ("stop", "length", "abort"):
            self.success.labels(**labels, finished_reason=reason)

    def _size_histograms(self, registry: CollectorRegistry, names: list[str]) -> list[Histogram]:
        """vLLM's histograms of sizes: a sequence's prompt and output, a request's n and
        max_tokens, an engine step's tokens (1-2-5 buckets)."""
        sizes = lambda name, doc: Histogram(name, doc, names, buckets=_SIZE_BUCKETS, registry=registry)  # noqa: E731
        self.request_prompt = sizes("vllm:request_prompt_tokens", "Prompt tokens of each finished sequence")
        self.request_generation = sizes("vllm:request_generation_tokens", "Generated tokens of each finished sequence")
        self.params_n = sizes("vllm:request_params_n", "The n of each request served")
        self.params_max_tokens = sizes("vllm:request_params_max_tokens", "The max_tokens of each request served")
        self.iteration_tokens = sizes("vllm:iteration_tokens_total", "Tokens run by each engine step")
        return [self.request_prompt, self.request_generation, self.params_n, self.params_max_tokens,
                self.iteration_tokens]

    def update_engine(self, stats: dict) -> None:
        """Gauges from the engine's state between steps; counters from its running totals;
        one `iteration_tokens` observation per step run since the last update."""
        for tokens in stats.get("iteration_tokens", ()):
            self.iteration_tokens.labels(**self.labels).observe(tokens)
        self.running.labels(**self.labels).set(stats["running"])
        self.waiting.labels(**self.labels).set(stats["waiting"])
        self.kv_usage.labels(**self.labels).set(stats["kv_usage"])
        for key, counter in (("preemptions", self.preemptions), ("prefix_queries", self.prefix_queries),
                             ("prefix_hits", self.prefix_hits)):
            delta = stats[key] - self._seen[key]
            if delta > 0:
                counter.labels(**self.labels).inc(delta)
                self._seen[key] = stats[key]

    def observe_finished(self, line: dict, request: Request) -> None:
        """Count one finished sequence, from its log line (`request_log`) and its engine
        request, in the series labelled `self.labels`: `prompt_tokens` += its prompt
        tokens, `generation_tokens` += its output tokens, `success` (with
        finished_reason = the line's) += 1; one observation in each of `ttft`, `e2e`,
        `queue`, `prefill`, `decode` whose value in the line is not None; and one `itl`
        observation per gap between consecutive `request.token_times` (k tokens: k - 1)."""
        raise NotImplementedError('Exercise 7.6: Metrics and the per-request log line — see 07_serving.ipynb')

    def observe_sizes(self, line: dict) -> None:
        """One finished sequence's sizes and its time running (`e2e_s - queue_s`, where both
        exist), from its log line (given code, beside 7.6's `observe_finished`)."""
        self.request_prompt.labels(**self.labels).observe(line["prompt_tokens"])
        self.request_generation.labels(**self.labels).observe(line["output_tokens"])
        if line["e2e_s"] is not None and line["queue_s"] is not None:
            self.inference.labels(**self.labels).observe(line["e2e_s"] - line["queue_s"])

    def observe_params(self, n: int, max_tokens: int) -> None:
        """One request's `n` and `max_tokens`, as it was handed to the engine."""
        self.params_n.labels(**self.labels).observe(n)
        self.params_max_tokens.labels(**self.labels).observe(max_tokens)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format (what GET /metrics answers)."""
        return generate_latest(self.registry)


_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                    7.5, 10.0, 20.0, 40.0, 80.0)
_SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)  # vLLM's 1-2-5
