# GENERATED from solutions/profiling/metrics.py by `course stubs --write`.
# Nothing to write here: given code of stage 08 (08_profiling/08_profiling.ipynb).
"""Stage 07's `/metrics` scrape (given): the request phases' shares from its histograms."""

from __future__ import annotations

#: Stage 07's Prometheus histograms of the request phases (vLLM's names).
PHASE_METRICS = {"queue": "vllm:request_queue_time_seconds", "prefill": "vllm:request_prefill_time_seconds",
                 "decode": "vllm:request_decode_time_seconds", "e2e": "vllm:e2e_request_latency_seconds"}


def parse_metrics(text: str) -> dict[str, float]:
    """A Prometheus text exposition (a `/metrics` scrape) as {sample name{labels}: value},
    parsed by `prometheus_client`'s own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = float(s.value)
    return out


def phase_shares_from_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """The phases' shares of end-to-end time from a `/metrics` scrape (`parse_metrics`):
    each phase histogram's `_sum` over the e2e histogram's `_sum`, every label set added
    up. The server observes the same spans it logs, so these agree with
    `latency_breakdown`'s shares over the same requests."""
    def total(name: str) -> float:
        hits = [v for k, v in metrics.items() if k == f"{name}_sum" or k.startswith(f"{name}_sum{{")]
        if not hits:
            raise ValueError(f"the scrape has no {name}_sum; is it stage 07's /metrics?")
        return float(sum(hits))

    e2e = total(PHASE_METRICS["e2e"])
    return {p: (total(PHASE_METRICS[p]) / e2e if e2e > 0 else float("nan")) for p in ("queue", "prefill", "decode")}
