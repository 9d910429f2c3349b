# GENERATED from solutions/profiling/collect.py by `course stubs --write`.
# Nothing to write here: given code of stage 08 (08_profiling/08_profiling.ipynb).
"""All the measurements in one run (given): `collect` is what `course profile` reports.

Each section uses this stage's exercises on the default model (or a given one) and returns
plain JSON-able numbers; `write_report` formats them. `cpu_sleep` and `cpu_clock_ok` pick
the clock: CPU time on one CPU thread, else the wall clock.
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from solutions.batching import ContinuousBatching, default_model, replay
from solutions.kv_cache.decoder import Decoder, embedding
from solutions.train import Llama
from solutions.workload import make_trace

from .decode_floor import decode_floor, measure_matvec_bandwidth, model_step_cost
from .engine_profile import profile_engine
from .latency import latency_breakdown, parse_request_log, recommend, record_from_request
from .memory import memory_breakdown
from .roofline import classify, measure_peak_bandwidth, measure_peak_flops
from .steps import ServingEngine, decode_engine, decode_step_fn, engine_max_len, prefill_chunk_fn
from .sweep import batch_sweep, find_knee
from .timers import _device_of, time_fn, timing_pitfalls

#: The report's sections, in order (`course profile --stages` picks some).
SECTIONS = ("timers", "ops", "memory", "sweep", "roofline", "latency")
#: Parameters above which a model is "large" (SmolLM2's 134.5 M; the default model has ~1 M): fewer batches.
BIG_MODEL = 20_000_000


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return o


def _shape(model: Decoder) -> dict:
    """The model's shape for the report: GPTConfig's names (n_embd: a Llama's dim), and a
    Llama's K/V heads and SwiGLU width."""
    cfg = model.config
    if isinstance(model, Llama):
        return {"n_layer": cfg.n_layers, "n_head": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads, "n_embd": cfg.dim,
                "hidden_dim": cfg.hidden_dim, "vocab_size": cfg.vocab_size, "block_size": cfg.max_seq_len}
    return {"n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_embd": cfg.n_embd, "vocab_size": cfg.vocab_size,
            "block_size": cfg.block_size}


def cpu_sleep(seconds: float) -> None:
    """Wait by burning CPU, so that `time.process_time` advances while we wait: the `sleep`
    of a trace replay whose engine runs on the CPU-time clock."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def cpu_clock_ok(device) -> bool:
    """Whether this process's CPU time (`time.process_time`) can time work on `device`: on
    the CPU with one torch thread it counts exactly the work, and — unlike the wall clock —
    not the time other jobs on a shared machine steal. (With n threads it would add up n.)"""
    return _device_of(device).type == "cpu" and torch.get_num_threads() == 1


def collect(model: Decoder | None = None, *, sections: Sequence[str] = SECTIONS, device=None, dtype=None,
            quick: bool = False, trace_path: str | Path | None = None,
            progress: Callable[[str], None] | None = None, what: str | None = None) -> dict:
    """Run the measurements of `sections` on `model` (default: the course's default model,
    loaded straight onto `device` in `dtype`) and return them as one JSON-able dict — the
    report's single source of numbers. A given model (a GPT or a Llama such as SmolLM2,
    named in the report by `what`) is moved to `device` / cast to `dtype` when they are
    given (None: as it is). A model of more than BIG_MODEL parameters sweeps batches up to
    64 (quick: 1, 4). The roofline also measures the bandwidth of a decode step's own
    product (`measure_matvec_bandwidth`) and puts the batch-1 step against its floor
    (data["roofline"]["decode_floor"], `decode_floor`).

    quick: fewer batch sizes and repeats (a few seconds; for demos and tests).
    Timings use the current torch thread count, recorded in `environment`; the timers,
    the sweep, the roofline's step times and the trace replay (its engine clock, with
    `cpu_sleep` to wait) use CPU time where `cpu_clock_ok` (one thread on the CPU), else
    the wall clock. The profiler always reports wall time.
    """
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        raise ValueError(f"sections must be a non-empty subset of {SECTIONS}, got {list(sections)}")
    say = progress or (lambda msg: None)
    device = _device_of(device) if device is not None else None
    if model is None:
        model, what = default_model(device=device or "cpu", dtype=dtype or torch.float32)
    else:
        what = what or "a given model"
    if device is not None or dtype is not None:
        model = model.to(device=device, dtype=dtype)
    device = embedding(model).device
    cfg = model.config
    large = model.num_params() > BIG_MODEL
    repeat = 3 if quick else 7
    if large:  # a step of SmolLM2 at batch 256 is ~1 s of one core: the knee is found well before
        batches = [1, 4] if quick else [1, 2, 4, 8, 16, 32, 64]
        big = 4 if quick else 16
    else:
        batches = [1, 4, 16] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256]
        big = 16 if quick else 32
    context = min(64, cfg.block_size // 2)
    cpu_clock = cpu_clock_ok(device)
    clock = time.process_time if cpu_clock else time.perf_counter
    data: dict = {
        "environment": {"device": str(device), "device_name": (torch.cuda.get_device_name(device)
                                                               if device.type == "cuda" else platform.machine()),
                        "torch": torch.__version__, "threads": torch.get_num_threads(), "quick": quick,
                        "engine": ServingEngine.__name__,
                        "clock": "process CPU time" if cpu_clock else "wall clock"},
        "model": {"what": what, "params": model.num_params(), **_shape(model),
                  "dtype": str(embedding(model).dtype).replace("torch.", "")},
        "conditions": {"context": context, "big_batch": big, "repeat": repeat},
    }
    if "timers" in sections:
        say("timers: cold vs warm vs unsynchronised")
        data["timers"] = {f"decode_b{b}": timing_pitfalls(decode_step_fn(model, b, context), device=device,
                                                          repeat=repeat, clock=clock) for b in (1, big)}
    if "ops" in sections:
        say(f"ops: torch.profiler around decode steps at batch 1 and batch {big}")
        data["ops"] = {}
        for b in (1, big):
            prof = profile_engine(decode_engine(model, b), wait=1, warmup=1, active=3,
                                  trace_path=trace_path if b == big else None)
            total = sum(o.step_self_s for o in prof.ops) or 1.0
            data["ops"][f"b{b}"] = {
                "batch": b, "steps": prof.steps, "step_ms": 1e3 * prof.labels["step"],
                "labels_ms": {k: 1e3 * v for k, v in prof.labels.items() if k != "step"},
                "ops_per_step": prof.ops_per_step, "top_level_ops_per_step": prof.top_level_ops_per_step,
                "kernels_per_step": prof.kernels_per_step,
                "top": [{"name": o.name, "calls_per_step": o.calls / prof.steps,
                         "self_us_per_step": 1e6 * o.step_self_s, "share": o.step_self_s / total}
                        for o in prof.top(8)],
                "by_shape": [{"name": n, "shapes": s, "calls": c, "self_us": 1e6 * t}
                             for n, s, c, t in prof.by_shape[:5]],
            }
    if "memory" in sections:
        say("memory: parameters, KV pool, activations")
        data["memory"] = {}
        for b in (1, big):
            mb = memory_breakdown(model, decode_engine(model, b))
            data["memory"][f"b{b}"] = {"batch": b, **asdict(mb), "kv_share": mb.kv_share, "total": mb.total}
    if "sweep" in sections or "roofline" in sections:
        say(f"sweep: decode throughput at batch {batches}")
        points = batch_sweep(model, batches, context=context, repeat=repeat, device=device, clock=clock)
        knee = find_knee([p.batch for p in points], [p.tokens_per_s for p in points], min_gain=0.1)
        data["sweep"] = {"context": context, "points": [asdict(p) for p in points],
                         "knee": None if knee is None else {"batch": knee.batch, "tokens_per_s": knee.throughput,
                                                            "min_gain": knee.min_gain}}
    if "roofline" in sections:
        say("roofline: peak FLOP/s and bandwidth, decode and prefill steps")
        dtype = embedding(model).dtype
        pf = measure_peak_flops(device, dtype=dtype, seconds=0.15 if quick else 0.3, clock=clock)
        pb = measure_peak_bandwidth(device, seconds=0.15 if quick else 0.3, clock=clock)
        nb = torch.empty((), dtype=dtype).element_size()
        by_batch = {p["batch"]: p for p in data["sweep"]["points"]}
        chunk = min(128, cfg.block_size - context)
        step_cost = model_step_cost
        steps = [("decode b=1", step_cost(cfg, batch=1, new_tokens=1, context=context, dtype_bytes=nb),
                  by_batch[1]["step_s"]),
                 (f"decode b={max(by_batch)}", step_cost(cfg, batch=max(by_batch), new_tokens=1, context=context,
                                                         dtype_bytes=nb), by_batch[max(by_batch)]["step_s"]),
                 (f"prefill {chunk}", step_cost(cfg, batch=1, new_tokens=chunk, context=context, dtype_bytes=nb),
                  time_fn(prefill_chunk_fn(model, chunk, context=context), repeat=repeat, device=device,
                          clock=clock).median)]
        pts = [classify(n, c, s, pf.value, pb.value) for n, c, s in steps]
        mv = measure_matvec_bandwidth(device, nbytes=(64 << 20) if quick else (256 << 20),
                                      seconds=0.15 if quick else 0.3, clock=clock)
        data["roofline"] = {"peak_flops": pf.value, "peak_flops_conditions": pf.conditions,
                            "peak_bandwidth": pb.value, "peak_bandwidth_conditions": pb.conditions,
                            "ridge": pf.value / pb.value, "points": [asdict(p) for p in pts],
                            "matvec_bandwidth": mv.value, "matvec_bandwidth_conditions": mv.conditions,
                            "decode_floor": decode_floor(pts[0].bytes, pts[0].seconds, mv.value)}
    if "latency" in sections:
        say("latency: a trace replayed through the engine, stage 07's request records")
        n_req = (8 if quick else 32) if large else (24 if quick else 64)
        trace = make_trace(n_req, profile="mix", rate=200.0, seed=0)
        max_batch = 8
        sleep = cpu_sleep if cpu_clock else time.sleep
        warm = make_trace(8, profile="mix", rate=None, seed=1)
        max_len = engine_max_len(model)
        replay(ServingEngine(model, ContinuousBatching(max_batch), clock=clock, max_len=max_len), warm,
               sleep=sleep)  # warm-up
        result = replay(ServingEngine(model, ContinuousBatching(max_batch), clock=clock, max_len=max_len), trace,
                        sleep=sleep)
        lines = [json.dumps(record_from_request(r)) for r in result.requests]
        log = parse_request_log(lines)
        bd = latency_breakdown(log.records)
        sweep = data.get("sweep")
        knee_b = None if sweep is None else (sweep["knee"]["batch"] if sweep["knee"] else
                                             max(p["batch"] for p in sweep["points"]))
        regime = None
        if "roofline" in data:
            regime = next(p["regime"] for p in data["roofline"]["points"] if p["name"] == "decode b=1")
        rec = recommend(bd, decode_regime=regime, knee_batch=knee_b, max_batch_size=max_batch)
        data["latency"] = {"trace": trace.describe(), "requests": len(log.records), "malformed": len(log.malformed),
                           "max_batch_size": max_batch, "breakdown": bd, "recommendation": asdict(rec)}
    return _jsonable(data)
