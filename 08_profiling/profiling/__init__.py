# GENERATED from solutions/profiling/__init__.py by `course stubs --write`.
# Nothing to write here: given code of stage 08 (08_profiling/08_profiling.ipynb).
"""Stage 08: profiling — where the time and the memory of the whole stack go.

The files, in exercise order (the lesson is in 08_profiling.ipynb):

    timers.py          time_fn, time_naive: warm-up, repeats, median, sync        8.1
    engine_profile.py  profile_engine: torch.profiler around engine steps          8.2
    memory.py          nbytes, peak_step_memory, memory_breakdown                  8.3
    sweep.py           batch_sweep, find_knee: throughput vs batch, the knee       8.4
    cost.py            step_cost: FLOPs and bytes of a step                        8.5
    roofline.py        measure_peak_flops / _bandwidth, classify: the regime       8.5
    latency.py         parse_request_log, latency_breakdown, recommend             8.6
    report.py          write_report: the Markdown report                           8.7
    steps.py           given: ServingEngine, decode_engine, decode / prefill steps
    metrics.py         given: stage 07's /metrics phase shares
    plots.py           given: the roofline, sweep and latency plots
    collect.py         given: collect, every measurement in one run (`course profile`)
    decode_floor.py    given: a Llama's step cost, the matvec bandwidth, decode against its floor
    demo.py            given: the summary that ends `course demo`
"""

from solutions.batching import default_model

from .collect import BIG_MODEL, SECTIONS, collect, cpu_clock_ok, cpu_sleep
from .cost import Cost, step_cost, weight_count
from .decode_floor import (MATVEC_BYTES, decode_floor, floor_section, llama_step_cost, measure_matvec_bandwidth,
                           model_step_cost)
from .demo import demo
from .engine_profile import EngineProfile, OpStat, _warm_profiler, label_engine, profile_engine
from .latency import (LOG_KEYS, Recommendation, RequestLog, latency_breakdown, parse_request_log, recommend,
                      record_from_request)
from .memory import MemoryBreakdown, kv_pool_bytes, memory_breakdown, nbytes, peak_step_memory, rss_bytes
from .metrics import PHASE_METRICS, parse_metrics, phase_shares_from_metrics
from .plots import plot_roofline
from .report import _num, write_report
from .roofline import Peak, RooflinePoint, classify, measure_peak_bandwidth, measure_peak_flops
from .steps import DECODE_MAX_LEN, ServingEngine, decode_engine, decode_step_fn, engine_max_len, prefill_chunk_fn
from .sweep import Knee, SweepPoint, batch_sweep, find_knee
from .timers import Timing, synchronize, time_fn, time_naive, timing_pitfalls

__all__ = [
    "Timing", "synchronize", "time_fn", "time_naive", "timing_pitfalls",
    "label_engine", "decode_engine", "OpStat", "EngineProfile", "profile_engine",
    "nbytes", "kv_pool_bytes", "rss_bytes", "peak_step_memory", "MemoryBreakdown", "memory_breakdown",
    "decode_step_fn", "prefill_chunk_fn", "SweepPoint", "batch_sweep", "Knee", "find_knee",
    "Cost", "weight_count", "step_cost", "Peak", "measure_peak_flops", "measure_peak_bandwidth", "RooflinePoint",
    "classify",
    "plot_roofline", "LOG_KEYS", "RequestLog", "parse_request_log", "record_from_request", "parse_metrics",
    "PHASE_METRICS", "phase_shares_from_metrics",
    "latency_breakdown", "Recommendation", "recommend", "SECTIONS", "cpu_sleep", "cpu_clock_ok", "collect",
    "write_report", "demo", "BIG_MODEL", "DECODE_MAX_LEN", "engine_max_len", "MATVEC_BYTES", "llama_step_cost",
    "model_step_cost", "measure_matvec_bandwidth", "decode_floor", "floor_section",
]
