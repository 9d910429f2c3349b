"""Stage 08 benchmark: batch-1 decode of SmolLM2-135M-Instruct against the memory-bandwidth floor.

At batch 1 a decode step reads every weight once and does ~2 FLOPs per weight: it cannot run
faster than its bytes / the memory's bandwidth (the floor). For each weight format of stage
04 — float32, bfloat16, int8 per-channel (`quantize_model(bits=8)`: the fused int8 kernel
where it runs) and int4 round-to-nearest (`quantize_model(bits=4, group_size=32)`) — this
bench decodes a chat prompt through stage 04's `generate` (greedy, preallocated cache, batch
1) and reports:

  weight MB       `weight_bytes(model)["total"]`: every parameter and buffer once (the tied
                  head is the embedding table, read whole each step; stage 04 keeps it float)
  floor ms        (weight bytes + the K/V a step reads at the run's mean context) / bandwidth
  ms/token        (time of generate(N + 1 tokens) - time of generate(1 token)) / N: decode
                  steps only, the prompt's prefill cancels out; median over the repeats
  tokens/s        1000 / ms/token
  % of floor      floor ms / ms/token (100 %: decoding at the memory's speed)
  matmuls ms      the model's Linear layers alone (the head included), each called once on one
                  row in the model's order: the step without attention, norms, RoPE, sampling,
                  the cache and the Python around them; median over the repeats
  rest ms         ms/token - matmuls ms: what the rest of the step costs
  matmul %        the profiler's share of self CPU time in the matrix products (aten::mm,
                  addmm, bmm, _weight_int8pack_mm) over 8 profiled decode steps (forward_cached
                  of one token on the preallocated cache, after the prompt)
  top ops         the three operators with the most self time there, with their shares

The bandwidth is measured in the same run, in alternation with the decodes (one measurement
before each round of the four formats; the median is used): `measure_matvec_bandwidth`, one
row times a 256 MiB float32 weight (8x the course machine's L3), the product a decode step
makes. The formats are timed in alternation too, so a change of load falls on all. On one
thread the clock is this process's CPU time (other jobs on a shared machine do not inflate
it), else the wall clock. The package measured is `course.load("kv_cache")` (and
"profiling" for the bandwidth): the learner's by default, the reference with --impl
solution. In smoke mode (COURSE_BENCH_SMOKE=1) a tiny random Llama stands in for SmolLM2.

    python 08_profiling/bench_decode.py [--impl student|solution] [--threads N] [--repeat N] [--tokens N] [--json FILE]
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from course.bench_impl import add_impl_argument, apply_smoke, load_impl, run_bench  # noqa: E402
from course.benchmark import Report, bench_args  # noqa: E402

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_weight_int8pack_mm")
PROMPT = [{"role": "user", "content": "Write a short poem about the sea."}]


def extra(p) -> None:
    add_impl_argument(p)
    p.add_argument("--tokens", type=int, default=32, help="decode steps timed per run (default 32)")


def load_model(kc, smoke: bool):
    """(model, prompt ids): SmolLM2 in float32 and a chat prompt, or a tiny random Llama
    (widths that stage 04's int8 kernel and int4 groups take) in smoke mode."""
    if smoke:
        from solutions.train import random_llama

        return random_llama(vocab_size=96, dim=64, hidden_dim=128, n_heads=4, n_kv_heads=2, max_seq_len=64,
                            std=0.1), [1, 5, 9, 3, 7]
    model, tok = kc.load_smollm2(dtype=torch.float32)
    return model, tok.encode(kc.render_chat(PROMPT))


def variants(kc, model) -> dict:
    """The weight formats measured, each its own model."""
    return {"fp32": model, "bf16": copy.deepcopy(model).to(torch.bfloat16),
            "int8 per-channel": kc.quantize_model(model, 8), "int4 RTN g32": kc.quantize_model(model, 4, 32)}


def decode_seconds(kc, model, prompt: list[int], tokens: int, clock) -> float:
    """Seconds per decode step: generate(tokens + 1) minus generate(1), over `tokens`."""
    t0 = clock()
    kc.generate(model, [prompt], 1)
    one = clock() - t0
    t0 = clock()
    kc.generate(model, [prompt], tokens + 1)
    return max(clock() - t0 - one, 1e-9) / tokens


def matmuls_seconds(kc, model, clock) -> float:
    """Seconds of one pass over the model's Linear layers (QuantLinear included), one row each."""
    mods = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, kc.QuantLinear))]
    dtype = next(model.parameters()).dtype if not any(isinstance(m, kc.QuantLinear) for m in mods) else torch.float32
    xs = [torch.randn(1, 1, m.in_features).to(dtype) for m in mods]
    t0 = clock()
    for m, x in zip(mods, xs):
        m(x)
    return clock() - t0


def profile_shares(kc, model, prompt: list[int], steps: int = 8) -> tuple[float, str]:
    """(matrix products' share of self CPU time, the top three operators) over `steps` decode
    steps (`forward_cached` of one token on the preallocated cache, as generate's loop makes
    them; the prompt's prefill runs before the profiler starts)."""
    from torch.profiler import ProfilerActivity, profile

    cache = kc.KVCache.for_model(model, 1, max_len=len(prompt) + steps)
    kc.forward_cached(model, torch.tensor([prompt]), cache)
    token = torch.tensor([[prompt[-1]]])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            kc.forward_cached(model, token, cache)
    ops = [(e.key, e.self_cpu_time_total) for e in prof.key_averages()]
    total = sum(t for _, t in ops) or 1.0
    mm = sum(t for k, t in ops if k in MATMULS) / total
    top = sorted(ops, key=lambda kt: -kt[1])[:3]
    return mm, ", ".join(f"{k.replace('aten::', '')} {100 * t / total:.0f}%" for k, t in top)


def main(argv=None) -> dict:
    args = bench_args("Stage 08: batch-1 decode of SmolLM2 against the memory-bandwidth floor", argv, extra=extra)
    smoke = apply_smoke(args)
    if args.tokens < 1:
        raise SystemExit(f"error: --tokens must be >= 1, got {args.tokens}")
    kc = load_impl(args, "kv_cache")
    prof = load_impl(args, "profiling")
    tokens = 4 if smoke else (8 if args.quick else args.tokens)
    one_thread = torch.get_num_threads() == 1
    clock = time.process_time if one_thread else time.perf_counter
    model, prompt = load_model(kc, smoke)
    models = variants(kc, model)
    mv_bytes = (4 << 20) if smoke else ((64 << 20) if args.quick else prof.MATVEC_BYTES)
    per_step: dict[str, list[float]] = {name: [] for name in models}
    mm_only: dict[str, list[float]] = {name: [] for name in models}
    bandwidth: list[float] = []
    conditions = ""
    with torch.no_grad():
        for r in range(args.warmup + args.repeat):
            peak = prof.measure_matvec_bandwidth("cpu", nbytes=mv_bytes, seconds=0.05 if smoke else 0.3, clock=clock)
            for name, m in models.items():
                t = decode_seconds(kc, m, prompt, tokens, clock)
                t_mm = matmuls_seconds(kc, m, clock)
                if r >= args.warmup:
                    per_step[name].append(t)
                    mm_only[name].append(t_mm)
            if r >= args.warmup:
                bandwidth.append(peak.value)
                conditions = peak.conditions
        profile_shares(kc, model, prompt)  # the profiler's one-off start-up, not counted
        shares = {name: profile_shares(kc, m, prompt) for name, m in models.items()}
    bw = statistics.median(bandwidth)
    kv_per_token = kc.KVCache.for_model(model, 1, max_len=1).bytes_per_token()
    mean_context = len(prompt) + 1 + (tokens + 1) / 2
    report = Report("08_profiling", args, "batch-1 decode (stage 04's generate, preallocated cache) against "
                    "weight bytes / measured bandwidth")
    print(f"bandwidth: {bw / 1e9:.2f} GB/s, median of {len(bandwidth)} ({conditions}); clock: "
          f"{'process CPU time' if one_thread else 'wall clock'}; prompt {len(prompt)} tokens, {tokens} decode steps "
          f"timed per run", flush=True)
    for name, m in models.items():
        wb = kc.weight_bytes(m)["total"]
        kv = kv_per_token * mean_context * (2 if name == "bf16" else 4) / 4
        floor = (wb + kv) / bw
        step = statistics.median(per_step[name])
        mm, top = shares[name]
        t_mm = statistics.median(mm_only[name])
        report.add(name, **{"weight MB": wb / 1e6, "floor ms": 1e3 * floor, "ms/token": 1e3 * step,
                            "tokens/s": 1 / step, "% of floor": 100 * floor / step, "matmuls ms": 1e3 * t_mm,
                            "rest ms": 1e3 * (step - t_mm), "matmul %": 100 * mm, "top ops": top})
    report.add("bandwidth", **{"GB/s": bw / 1e9, "spread %": 100 * (max(bandwidth) - min(bandwidth)) / bw,
                               "conditions": conditions})
    return report.finish()


if __name__ == "__main__":
    run_bench(main)
