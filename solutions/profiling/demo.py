"""The profile summary that ends `course demo` (given): a few seconds on the default model."""

from __future__ import annotations

import time

import torch

from solutions.batching import default_model
from solutions.gpt import on_one_thread

from .cost import step_cost
from .engine_profile import profile_engine
from .roofline import classify, measure_peak_bandwidth, measure_peak_flops
from .steps import decode_engine
from .sweep import batch_sweep, find_knee


@on_one_thread
def demo(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> None:
    """The profile summary that ends `course demo`: a quick look at the default model's
    decode step (a few seconds), on `device` in `dtype`."""
    model, what = default_model(device, dtype)
    device = model.transformer.wte.weight.device
    on_cpu = device.type == "cpu"
    print(f"model: {what}, {model.num_params():,} parameters, {str(dtype).replace('torch.', '')}; "
          f"1 torch thread, {'CPU' if on_cpu else device}")
    for b in (1, 16):
        prof = profile_engine(decode_engine(model, b), wait=1, warmup=1, active=3)
        top = ", ".join(f"{o.name} {o.step_self_s / sum(x.step_self_s for x in prof.ops):.0%}" for o in prof.top(3))
        print(f"decode step, batch {b:>2}: {1e3 * prof.labels['step']:.2f} ms under the profiler (wall clock), "
              f"{prof.top_level_ops_per_step:.0f} ops from Python; top self time: {top}")
    # one thread on the CPU: CPU time is the work, not what others steal; a GPU: the wall clock
    cpu = time.process_time if on_cpu else time.perf_counter
    points = batch_sweep(model, [1, 4, 16, 32], context=64, repeat=3, warmup=1, clock=cpu)
    knee = find_knee([p.batch for p in points], [p.tokens_per_s for p in points])
    print("decode tokens/s by batch: " + ", ".join(f"{p.batch}: {p.tokens_per_s:.0f}" for p in points)
          + (f"; knee at batch {knee.batch}" if knee else "; no knee inside the sweep"))
    cfg = model.config
    pf = measure_peak_flops(device, dtype=dtype, seconds=0.05, clock=cpu)
    pb = measure_peak_bandwidth(device, seconds=0.05, clock=cpu)
    nb = torch.empty((), dtype=dtype).element_size()
    for p in points[:1] + points[-1:]:
        pt = classify(f"decode b={p.batch}", step_cost(cfg, batch=p.batch, new_tokens=1, context=64, dtype_bytes=nb),
                      p.step_s, pf.value, pb.value)
        print(f"{pt.name}: {pt.intensity:.1f} FLOPs/byte, {pt.efficiency:.0%} of its roof -> {pt.regime}-bound")
    print(f"(peaks: {pf.value / 1e9:.0f} GFLOP/s, {pb.value / 1e9:.1f} GB/s; step times in "
          f"{'CPU time' if on_cpu else 'wall-clock time'}; "
          "full report: course profile)")
